"""Three daemons hosting stories260K on loopback, for the Python tests of the daemons
(odd_requests.py, test_page.py): started with free ports, a token file and one kernel thread
each; every process group killed by close(), also when a test fails."""
import http.client
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from ports import free_port  # noqa: E402  claimed for this process's life, below the ephemeral range

WORLD = 3


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class Ring:
    """WORLD daemons hosting the model in `model_dir`, logs in `work`; `extra`: more serve options."""

    def __init__(self, exe, model_dir, work, extra=()):
        self.work = work
        self.procs = []
        self.token = os.urandom(16).hex()
        token_file = os.path.join(work, "token")
        with open(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(self.token)
        master = free_port()
        self.api = free_port()
        self.metrics = [free_port() for _ in range(WORLD)]
        for r in range(WORLD):
            args = [exe, "serve", "--rank", str(r), "--world-size", str(WORLD), "--master", "127.0.0.1:%d" % master,
                    "--listen", "127.0.0.1", "--control", "127.0.0.1:%d" % free_port(),
                    "--metrics", "127.0.0.1:%d" % self.metrics[r], "--token-file", token_file, "--threads", "1",
                    "--timeout", "10", *extra, "--model", os.path.join(model_dir, "stories260K.bin"),
                    "--tokenizer", os.path.join(model_dir, "tok512.bin")]
            if r == 0:
                args += ["--api", "127.0.0.1:%d" % self.api]
            log = open(os.path.join(work, "rank%d.log" % r), "ab")
            self.procs.append(subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True,
                                               env=dict(os.environ, OMP_NUM_THREADS="1")))

    def close(self):
        for p in self.procs:
            kill_group(p)

    def log(self, r):
        with open(os.path.join(self.work, "rank%d.log" % r), errors="replace") as f:
            return f.read()

    def request(self, method, port, path, body=None, key=None, timeout=60):
        """(status, body text); (0, "") when the connection failed."""
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if key:
            headers["Authorization"] = "Bearer " + key
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        except OSError:
            return 0, ""
        finally:
            c.close()

    def get(self, port, path):
        return self.request("GET", port, path, timeout=10)

    def scrape(self, r):
        """Rank r's /metrics as {series: value}."""
        out = {}
        for line in self.get(self.metrics[r], "/metrics")[1].splitlines():
            if line and not line.startswith("#"):
                series, value = line.rsplit(" ", 1)
                out[series] = float(value)
        return out

    def metric(self, r, series):
        return self.scrape(r).get(series, 0.0)

    def wait_ready(self, seconds):
        until = time.time() + seconds
        while time.time() < until:
            if all(self.get(self.metrics[r], "/healthz")[0] == 200 for r in range(WORLD)):
                return True
            time.sleep(0.2)
        return False
