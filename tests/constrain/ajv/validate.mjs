// ajv on the texts a constrained decoder produced (run.sh validate): node validate.mjs CACHE CASES.json REPORT.json
// CASES.json: [{"name": ..., "schema": {...} | null, "outputs": ["text", ...]}]; null is json_object mode.
// REPORT.json: {"checked": N, "failures": [{"case", "output", "text", "error"}]}.
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";

const [cache, casesPath, reportPath] = process.argv.slice(2);
const require = createRequire(cache + "/node_modules/");
const Ajv2020 = require("ajv/dist/2020").default;

const cases = JSON.parse(readFileSync(casesPath, "utf8"));
const failures = [];
let checked = 0;
for (const c of cases) {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  const validate = c.schema === null ? null : ajv.compile(c.schema);
  c.outputs.forEach((text, i) => {
    checked++;
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      failures.push({ case: c.name, output: i, text, error: "JSON.parse: " + e.message });
      return;
    }
    if (validate === null) {
      if (typeof value !== "object" || value === null || Array.isArray(value))
        failures.push({ case: c.name, output: i, text, error: "not a JSON object" });
    } else if (!validate(value)) {
      failures.push({ case: c.name, output: i, text, error: ajv.errorsText(validate.errors) });
    }
  });
}
writeFileSync(reportPath, JSON.stringify({ checked, failures }));
