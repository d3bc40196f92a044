"""Child processes of the local stack: free loopback ports, readiness, and sure shutdown."""
from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

LOOPBACK = "127.0.0.1"
PR_SET_PDEATHSIG = 1


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` different free loopback ports. Each socket stays bound until all are picked: one
    bound and closed before the next is asked for can be handed out again, and two services of a
    stack on one port answer each other's requests (the likely cause of a stack whose CreateQueue
    got dynalite's UnknownOperationException)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def die_with_parent() -> None:
    """Ask Linux to SIGTERM the child if the stack dies without cleaning up (even on SIGKILL)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the stack's own shutdown still stops its children


# The child asks for the parent-death signal itself, then becomes the command (the setting survives
# exec), and leaves at once if its parent is already gone. A preexec_fn would run Python between
# fork and exec, which is unsafe in a parent with threads: a child segfaulted there in the tests.
_DIE_WITH_PARENT_THEN_EXEC = f"""
import ctypes, os, signal, sys
try:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl({PR_SET_PDEATHSIG}, signal.SIGTERM)
except OSError:
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def start(command: list[str], log_path: Path, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """A child in its own session: Ctrl-C or a SIGTERM to the terminal's process group reaches
    only the stack, which stops its children in order (after the handlers that use them)."""
    log = open(log_path, "ab")
    wrapped = [sys.executable, "-c", _DIE_WITH_PARENT_THEN_EXEC, str(os.getpid()), *command]
    return subprocess.Popen(wrapped, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=cwd, start_new_session=True)


def wait_for_port(port: int, process: subprocess.Popen[bytes], name: str, log_path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with code {process.returncode}; see {log_path}")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not open port {port} within {timeout:.0f} s; see {log_path}")


def stop(processes: list[subprocess.Popen[bytes]], grace: float = 5) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def descendants(pid: int) -> list[int]:
    """`pid` and every process under it, parents before their children (from /proc: Linux)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    found = [pid]
    for parent in found:  # grows as it goes: each process's children join the walk
        found += [child for child, of in parents.items() if of == parent]
    return found


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
