// The report the client scripts print for tests/serve/test_openai_client.cpp, which asserts
// each check: every check is recorded, failed or not, so that one failure shows beside the
// rest instead of hiding them.

export const checks = [];

export function check(name, ok, detail) {
  checks.push({ name, ok: Boolean(ok), detail: ok ? '' : JSON.stringify(detail ?? null).slice(0, 2000) });
}

// A section that throws (a client error no check expected) is one failed check, and the
// sections after it still run.
export async function section(name, fn) {
  try {
    await fn();
  } catch (e) {
    check(name + ': threw', false, String(e && e.stack ? e.stack : e));
  }
}

// What a failed check shows of the APIError a request got.
export const errorOf = ({ e }) => e && { status: e.status, code: e.code, param: e.param, type: e.type, message: e.message, cls: e.constructor.name };
