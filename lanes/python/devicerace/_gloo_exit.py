"""A process that ran Gloo collectives lets Gloo's worker threads settle before the interpreter ends.

PyTorch 2.11's Gloo process group keeps its worker threads ("pt_gloo_runloop") for the process's
life, even after destroy_process_group(). Such a thread releases a finished collective's tensors
after the caller's wait() has returned (a barrier releases the allreduces before it). Where a
tensor has a Python object, the release takes the GIL; once the interpreter is finalizing, Python
3.11 ends a thread that takes the GIL with pthread_exit, whose unwinding through Gloo's loop ends
in std::terminate. A data-parallel script's rank 0 so aborted after all its work ("terminate
called without an active exception", SIGABRT) in 10 of 150 races on 2 vCPUs, where its Gloo thread
had not run between the script's last barrier and its exit (each backtrace: ProcessGroupGloo's
runLoop, ~AsyncBarrierWork, ~AsyncAllreduceWork, TensorImpl::decref_pyobject, pthread_exit).

At the lane's exit, settle() waits, the GIL released, until every such thread is asleep with
its CPU time unchanged over a 10 ms sleep, at most a second. Without /proc (not Linux) it
finds no thread and returns at once.
"""
import os
import time

_NAME = "pt_gloo_runloop"


def _gloo_threads(task="/proc/self/task"):
    """{thread id: (state, CPU ticks)} of the process's Gloo worker threads."""
    out = {}
    try:
        tids = os.listdir(task)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{task}/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # (a thread that ended meanwhile)
        # "tid (comm) state ppid … utime stime …": the name may hold spaces and parentheses.
        close = stat.rfind(")")
        if stat[stat.find("(") + 1:close] != _NAME:
            continue
        fields = stat[close + 2:].split()
        out[tid] = (fields[0], int(fields[11]) + int(fields[12]))
    return out


def settle(timeout=1.0, interval=0.01, threads=_gloo_threads):
    """Waits until every Gloo worker thread is asleep ("S") and its CPU time unchanged over
    `interval`, at most `timeout` seconds. True when they settled (or there were none)."""
    before = threads()
    if not before:
        return True
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        time.sleep(interval)
        now = threads()
        if all(seen[0] == "S" and before.get(tid) == seen for tid, seen in now.items()):
            return True
        before = now
    return False
