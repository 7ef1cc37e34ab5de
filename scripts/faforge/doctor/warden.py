"""Run one command and leave none of its processes behind, even those that left its session (`setsid`).

faforge.doctor.probe_run starts this file as `python -I -S warden.py STATUS_FD PARENT_PID COMMAND...`,
with the command's stdin, stdout and stderr as its own. It is a process of its own so that faforge's
process (a test runner, a library's user) never changes: the warden alone is the *child subreaper*
(Linux prctl PR_SET_CHILD_SUBREAPER, no privilege needed; man 2 prctl): a process of the command whose
parent exits is re-parented to the warden, not to init, so every process the command started stays a
descendant of the warden, whatever session or process group it moved to. When the command exits, or
on SIGTERM, SIGINT or SIGHUP (faforge's deadline or output cap, or faforge itself gone: the warden asks
for SIGTERM when its parent dies), it kills every descendant with SIGKILL, reaps them until it has no
child left, then writes how the command ended to STATUS_FD ("exit N", N negative for a signal; "error
ERRNO" when it could not be started; "stopped") and exits. Where prctl is missing (not Linux) it kills
the command's process group, and a process that left it can outlive the command.

Standard library only, and no faforge import: it runs with -I -S, like probe.py in the target.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How long the warden keeps killing: a process it may not kill (setuid) must not keep it alive for ever.
CLEAR_S = 20


class Stop(Exception):
    """faforge asked the warden to stop the command (or faforge is gone)."""


def _stop(signum, frame):
    for stop in STOP_SIGNALS:  # once: a second signal must not cut the clearing short
        signal.signal(stop, signal.SIG_IGN)
    raise Stop


def prctl(option, value):
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0
    except (OSError, AttributeError):  # no libc prctl: not Linux
        return False


def descendants(root):
    """Every process below `root`, read from /proc (parent links; a subreaper's orphans are its children)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": the name may hold anything
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def clear(group):
    """SIGKILL the command's process group and every descendant, and reap them all, until no child is left."""
    me, until = os.getpid(), time.monotonic() + CLEAR_S
    while time.monotonic() < until:
        if group:
            try:
                os.killpg(group, signal.SIGKILL)
            except OSError:
                pass
        for pid in descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:  # nothing left to reap: every process below the warden is gone
            return
        time.sleep(0.005)


def quiet():
    """Let go of the command's stdin, stdout and stderr: faforge
    sees their end when the command's processes close them."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def main():
    status_fd, parent, command = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop)
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    outcome, group = "stopped", 0
    try:
        if os.getppid() != parent:  # faforge died before the death signal was asked for
            raise Stop
        try:
            child = subprocess.Popen(command, start_new_session=True)  # its own session: one group to kill
        except OSError as exc:
            outcome = f"error {exc.errno or 0}"
        else:
            group = child.pid
            quiet()
            while outcome == "stopped":
                pid, status = os.waitpid(-1, 0)  # orphans re-parented here are reaped as they come
                if pid == child.pid:
                    child.returncode = os.waitstatus_to_exitcode(status)
                    outcome = f"exit {child.returncode}"
    except Stop:
        pass
    try:  # a stop signal raises Stop once at most (see _stop): here, if it came after the command ended
        for stop in STOP_SIGNALS:
            signal.signal(stop, signal.SIG_IGN)
    except Stop:
        pass
    clear(group)
    os.write(status_fd, outcome.encode())


if __name__ == "__main__":
    main()
