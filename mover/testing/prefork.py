"""Start `moverd` and the command-line tools in the tests as real processes without paying their imports each time.

The suite starts about 900 moverd and `mover-log-dirs` processes, and each spent ~0.35 s of CPU importing the package
before doing anything (docs/architecture.md, "The test suite: where its time goes"): a sixth of the suite's CPU on a
two-core machine. A zygote, one per test process, imports those modules once and forks a child for each start. The
child is a real process of its own, as `subprocess.Popen` would give: its own pid (a test kills it -9, stops it with
SIGSTOP, reads /proc/PID), the stdin, stdout and stderr the caller hands over, the caller's argv, environment and
working directory, and the exit status of the entry point it runs, exactly as the console script or `python -m` would
run it. What it skips is the interpreter's start and the imports, which no test is about: the tests of start-up
itself (`--help` starts no JVM, moverd imports its metrics only when asked) run their own processes.

    proc = prefork.Popen([sys.executable, "-m", "mover.daemon", "--config", c], env=env, stdout=log, stderr=log)
    done = prefork.run([SCRIPT, "--describe", ...], capture_output=True, text=True, timeout=60)

Both take subprocess's arguments (those the tests use) and fall back to subprocess itself for any other command.

`MOVER_TEST_PREFORK=0` (or a platform without pidfds) starts every process the ordinary way.

The zygote is a child of the test process (`python -m mover.testing.prefork`) and forks only while it has a single
thread. Requests travel on a SEQPACKET socket pair with the caller's file descriptors (SCM_RIGHTS); each child gets a
socket pair of its own on which the zygote sends its pid and a pidfd (so signals can never reach a recycled pid), and
later its wait status. The zygote exits when the test process closes its end (the process ended).
"""

from __future__ import annotations

import atexit
import importlib
import io
import json
import locale
import os
import runpy
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

ENV_SWITCH = "MOVER_TEST_PREFORK"
# What the zygote imports before it forks: what moverd and the tools import (each module's own imports follow).
PRELOAD = ("mover.daemon.main", "mover.cli.log_dirs", "mover.cli.reassign_partitions", "mover.testing.driver")
# Modules that read the environment when imported (mover/faults.py: the crash points): executed again in each child
# under the caller's environment, as a fresh interpreter would.
RELOAD_IN_CHILD = ("mover.faults",)
_MAX_REQUEST = 1 << 20
_STATUS_BYTES = 64


@dataclass(frozen=True)
class _Request:
    argv0: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    module: str | None  # `python -m MODULE`
    entry: str | None  # "package.module:function", as a console script calls it


class ForkedProcess:
    """The part of `subprocess.Popen` the tests use, for a child of the zygote."""

    def __init__(self, args: list[str], channel: socket.socket, pid: int, pidfd: int,
                 pipes: dict[str, IO[Any]], text_mode: bool) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[Any] | None = pipes.get("stdin")
        self.stdout: IO[Any] | None = pipes.get("stdout")
        self.stderr: IO[Any] | None = pipes.get("stderr")
        self._text = text_mode
        self._channel = channel
        self._pidfd = pidfd
        self._lock = threading.Lock()

    def _collect(self, timeout: float | None) -> int | None:
        # The lock is not held while waiting, so another thread can signal the child meanwhile (Popen's too).
        if self.returncode is None:
            try:
                ready, _, _ = select.select([self._channel], [], [], timeout)
            except (ValueError, OSError):
                ready = []  # another thread collected the status and closed the channel
            with self._lock:
                if self.returncode is None and ready:
                    data = self._channel.recv(_STATUS_BYTES)
                    # Empty: the zygote went before it could report (the test process is ending), as if killed.
                    self.returncode = int(data) if data else -signal.SIGKILL
                    self._channel.close()
                    os.close(self._pidfd)
        return self.returncode

    def poll(self) -> int | None:
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        rc = self._collect(timeout)
        if rc is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return rc

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self.returncode is not None:
                return
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass  # exited; its status is on the way

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Both pipes read to their end, then the exit status, as Popen.communicate (no input); on timeout the child
        is killed (as subprocess.run does) and TimeoutExpired raised."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.stdin is not None:
            self.stdin.close()
        chunks: dict[str, list[bytes]] = {}
        sel = selectors.DefaultSelector()
        for name, f in (("stdout", self.stdout), ("stderr", self.stderr)):
            if f is not None:
                chunks[name] = []
                sel.register(f.fileno(), selectors.EVENT_READ, name)
        try:
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.kill()
                    self.wait()
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.data].append(data)
                    else:
                        sel.unregister(key.fd)
        finally:
            sel.close()
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            self.wait(left)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        out = [b"".join(chunks[n]) if n in chunks else None for n in ("stdout", "stderr")]
        if self._text:
            return tuple(text(b) if b is not None else None for b in out)  # type: ignore[return-value]
        return out[0], out[1]


class _Zygote:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in os.environ.items() if k not in ("MOVERD_CRASH_AT", "MOVERD_PAUSE_AT",
                                                                  "MOVERD_WEDGE_AT", "MOVERD_FAIL_AT")}
        self.proc = subprocess.Popen([sys.executable, "-m", "mover.testing.prefork", str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, env=env)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        ready = ours.recv(16)
        if ready != b"ready":
            raise RuntimeError(f"the prefork zygote did not start (exit {self.proc.wait()})")

    def spawn(self, request: _Request, stdio: tuple[int, int, int]) -> tuple[socket.socket, int, int]:
        mine, childs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            payload = json.dumps(request.__dict__).encode()
            with self.lock:
                socket.send_fds(self.sock, [payload], [childs.fileno(), *stdio])
            msg, fds, _, _ = socket.recv_fds(mine, 64, 1)
        finally:
            childs.close()
        if not fds:
            mine.close()
            raise RuntimeError(f"the prefork zygote refused: {msg.decode(errors='replace')}")
        return mine, int(msg), fds[0]


_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0" and hasattr(os, "pidfd_open") and sys.platform == "linux"


def _get_zygote() -> _Zygote:
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.proc.poll() is not None:
            _zygote = _Zygote()
            atexit.register(_zygote.sock.close)
        return _zygote


def _fd(target: int | IO[Any] | None, default: int, mode: int, closers: list[int]) -> int:
    """The descriptor to hand over for one of the child's stdio: inherited (None), DEVNULL, a file or a raw fd."""
    if target is None:
        return default
    if target == subprocess.DEVNULL:
        fd = os.open(os.devnull, mode)
        closers.append(fd)
        return fd
    if isinstance(target, int):
        return target
    return target.fileno()


def _entry(args: list[str]) -> tuple[str | None, str | None, str, list[str]] | None:
    """(module, entry point, argv[0], the rest) of a command the zygote can run: `python -m mover...` or one of the
    package's console scripts; None for anything else."""
    if len(args) >= 3 and args[0] == sys.executable and args[1] == "-m" and args[2].startswith("mover."):
        return args[2], None, "-m", args[3:]
    entry = _console_scripts().get(os.path.basename(args[0])) if args else None
    if entry is not None:
        return None, entry, args[0], args[1:]
    return None


def Popen(args: list[str], *, stdin: int | IO[Any] | None = None,  # noqa: N802 (subprocess's name)
          stdout: int | IO[Any] | None = None, stderr: int | IO[Any] | None = None,
          env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
          text: bool = False) -> ForkedProcess | subprocess.Popen[Any]:
    """subprocess.Popen(args, ...) for the arguments the tests use; through the zygote when args is moverd or one of
    our tools and prefork is on, else subprocess.Popen itself. PIPE pipes are line-buffered text with text=True."""
    args = [os.fspath(a) for a in args]
    found = _entry(args) if enabled() else None
    if found is None:
        return subprocess.Popen(args, stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd, text=text,
                                bufsize=1 if text else -1)
    module, entry, argv0, rest = found
    closers: list[int] = []
    pipes: dict[str, IO[Any]] = {}
    fds: list[int] = []
    try:
        for name, target, default, mode in (("stdin", stdin, 0, os.O_RDONLY), ("stdout", stdout, 1, os.O_WRONLY),
                                            ("stderr", stderr, 2, os.O_WRONLY)):
            if target == subprocess.PIPE:
                r, w = os.pipe()
                ours, theirs = (w, r) if name == "stdin" else (r, w)
                closers.append(theirs)
                fds.append(theirs)
                write = name == "stdin"
                if text:
                    pipes[name] = open(ours, "w" if write else "r", buffering=1 if write else -1,  # noqa: SIM115
                                       encoding=locale.getpreferredencoding(False))
                else:
                    pipes[name] = open(ours, "wb" if write else "rb", buffering=0)  # noqa: SIM115
            elif name == "stderr" and target == subprocess.STDOUT:
                fds.append(fds[1])
            else:
                fds.append(_fd(target, default, mode, closers))
        request = _Request(argv0=argv0, argv=rest, env=dict(os.environ if env is None else env),
                           cwd=os.fspath(cwd if cwd is not None else os.getcwd()), module=module, entry=entry)
        channel, pid, pidfd = _get_zygote().spawn(request, (fds[0], fds[1], fds[2]))
    except BaseException:
        for f in pipes.values():
            f.close()
        raise
    finally:
        for fd in closers:
            os.close(fd)
    return ForkedProcess(args, channel, pid, pidfd, pipes, text)


def run(args: list[str], *, capture_output: bool = False, text: bool = False, timeout: float | None = None,
        env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
        stdin: int | IO[Any] | None = None, check: bool = False) -> subprocess.CompletedProcess[Any]:
    """subprocess.run(args, ...) for the arguments the tests use, through the zygote where Popen would be."""
    pipe = subprocess.PIPE if capture_output else None
    proc = Popen(args, stdin=stdin, stdout=pipe, stderr=pipe, env=env, cwd=cwd, text=text)
    if isinstance(proc, subprocess.Popen):
        with proc:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise
    else:
        out, err = proc.communicate(timeout)
    rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    if check and rc:
        raise subprocess.CalledProcessError(rc, args, out, err)
    return subprocess.CompletedProcess(args, rc, out, err)


def text(data: bytes) -> str:
    # As subprocess's text mode decodes (the locale's encoding, universal newlines).
    return io.TextIOWrapper(io.BytesIO(data), encoding=locale.getpreferredencoding(False)).read()


_scripts: dict[str, str] | None = None


def _console_scripts() -> dict[str, str]:
    """Console script name -> "module:function", from the installed package's metadata, as pip wrote the scripts."""
    global _scripts
    if _scripts is None:
        from importlib.metadata import entry_points

        _scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")
                    if ep.value.startswith("mover.")}
    return _scripts


# --- the zygote ---------------------------------------------------------------------------------------------------


def _serve(control: socket.socket) -> _Request | None:
    """Fork a child per request until the control socket closes. Returns None in the zygote at its end, and the
    request in each child, with the child's stdio in place and every descriptor of the zygote's closed."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd is written
    channels: dict[int, socket.socket] = {}
    control.sendall(b"ready")
    while True:
        try:
            ready, _, _ = select.select([control, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            os.read(wake_r, 4096)
            while channels:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                channel = channels.pop(pid, None)
                if channel is not None:
                    try:
                        channel.send(str(os.waitstatus_to_exitcode(status)).encode())
                    except OSError:
                        pass  # the caller is gone
                    channel.close()
        if control not in ready:
            continue
        try:
            payload, fds, _, _ = socket.recv_fds(control, _MAX_REQUEST, 4)
        except OSError:
            payload, fds = b"", []
        if not payload:
            return None  # the test process closed its end
        channel = socket.socket(fileno=fds[0])
        stdio = fds[1:4]
        request = _Request(**json.loads(payload))
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for other in (control, channel, *channels.values()):
                other.close()
            os.close(wake_r)
            os.close(wake_w)
            for target, fd in enumerate(stdio):
                os.dup2(fd, target)
            for fd in stdio:
                if fd > 2:
                    os.close(fd)
            return request
        for fd in stdio:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        try:
            socket.send_fds(channel, [str(pid).encode()], [pidfd])
        except OSError:
            os.kill(pid, signal.SIGKILL)  # the caller is gone: nobody would wait for this child
        finally:
            os.close(pidfd)
        channels[pid] = channel


def _become(request: _Request) -> None:
    """In the child: the caller's environment and directory, then the entry point; its exit is the process's."""
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    for name in RELOAD_IN_CHILD:
        if name in sys.modules:
            importlib.reload(sys.modules[name])
    if request.module is not None:
        sys.argv = ["-m", *request.argv]
        # `python -m X` runs X as __main__ before anything imports X; the zygote's copy would make runpy warn on
        # stderr, and a module that imports X later gets its own copy, as it would there.
        sys.modules.pop(request.module, None)
        runpy.run_module(request.module, run_name="__main__", alter_sys=True)
        sys.exit(0)
    assert request.entry is not None
    sys.argv = [request.argv0, *request.argv]
    module_name, _, attr = request.entry.partition(":")
    func: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        func = getattr(func, part)
    sys.exit(func())


def _main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:
        raise SystemExit("prefork: an import started a thread; forking now would be unsafe")
    request = _serve(control)
    if request is None:
        return
    _become(request)


if __name__ == "__main__":
    _main()
