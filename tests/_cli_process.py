"""One real process that runs several ``soloist`` commands in turn.

A test that runs a sequence of commands against one cluster (approve, then resume, then
history, ...) pays for a Python start, the imports and a Ray connection once instead of once a
command. Each command runs as ``python -m cluster.cli`` would run it: ``cluster.cli.main(argv)``
with the process's file descriptors 1 and 2 sent to files of its own, so everything written
to stdout or stderr while it runs (rich's output, Ray's forwarded lines, a child process's)
belongs to that command; its return value is the exit code. The test reads each result as a
``subprocess.CompletedProcess``, so it asserts on it as on a process of its own.

The commands of one ``CliProcess`` share their Ray connection: the first one connects (an
embedded Ray, ``RAY_ADDRESS``, or its ``--address``) and the later ones keep it, as
``connect`` does when a process is already connected. Commands whose subject is a Ray of
their own (a new embedded one) need a process of their own.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["CliProcess"]

REPO = Path(__file__).resolve().parents[1]


class CliProcess:
    """A process that runs ``soloist`` commands one after another, on request.

    ``env`` and ``cwd`` are the process's, as for ``subprocess.run``; ``timeout`` bounds each
    command (a hang guard: the process is killed and the test fails naming the command).
    """

    def __init__(self, *, env: dict[str, str], cwd: Path = REPO, timeout: float = 300) -> None:
        self._timeout = timeout
        self._log = tempfile.NamedTemporaryFile(prefix="soloist-cli-process-", suffix=".log", delete=False)
        self._answers, answers_w = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests._cli_process", str(answers_w)],
            stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT, text=True,
            env={**env, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)},
            cwd=cwd, pass_fds=(answers_w,),
        )
        os.close(answers_w)
        self._pending = b""

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``soloist ARGS`` in the process and return its exit code, stdout and stderr."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(list(args)) + "\n")
        self._proc.stdin.flush()
        answer = json.loads(self._read_line(args))
        return subprocess.CompletedProcess(["soloist", *args], answer["code"], answer["stdout"], answer["stderr"])

    def _read_line(self, args: tuple[str, ...]) -> bytes:
        deadline = time.monotonic() + self._timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._answers], [], [], max(0.0, left))
            chunk = os.read(self._answers, 1 << 16) if ready else b""
            if not chunk:
                self._proc.kill()
                self._proc.wait()
                why = "did not answer in time" if not ready else f"exited with {self._proc.returncode}"
                raise AssertionError(f"soloist {' '.join(args)}: the command process {why}; its log:\n{self.log()[-4000:]}")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def log(self) -> str:
        """What the process wrote outside its commands (its start, Ray's lines between commands)."""
        return Path(self._log.name).read_text(errors="replace")

    def close(self) -> None:
        """End the process (it disconnects from Ray as any driver does at exit) and wait for it."""
        try:
            if self._proc.stdin is not None and not self._proc.stdin.closed:
                self._proc.stdin.close()
            code = self._proc.wait(timeout=self._timeout)
            assert code == 0, f"the command process exited with {code}; its log:\n{self.log()[-4000:]}"
        finally:
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            os.close(self._answers)
            self._log.close()
            os.unlink(self._log.name)

    def __enter__(self) -> CliProcess:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
            return
        try:
            self.close()
        except AssertionError:
            pass  # the test's own failure is the one to report


def _serve(answers: int) -> None:
    """The process's side: one JSON list of arguments a line on stdin, one JSON answer a line on
    ``answers``, until stdin closes."""
    from cluster.cli import main

    for line in sys.stdin:
        argv = json.loads(line)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            sys.stdout.flush()
            sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                code = main(argv)
            except SystemExit as exc:  # as `python -m cluster.cli` would exit
                code = exc.code if isinstance(exc.code, int) else 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
            out.seek(0)
            err.seek(0)
            answer = {"code": code, "stdout": out.read().decode(errors="replace"), "stderr": err.read().decode(errors="replace")}
        data = (json.dumps(answer) + "\n").encode()
        while data:
            data = data[os.write(answers, data):]


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
