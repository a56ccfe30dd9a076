"""Out of memory, decided in one place: from the error the agent caught (tbdkit.agent.run) or from the
signal that killed it under the address-space cap (tbdkit.launch.outcome, when the agent wrote nothing).
Either way the run's status is `oom` with the message given here."""

from __future__ import annotations

# Under --memory-limit-mb (an address-space cap) allocations fail inside native code too, and some
# of it says so in its own words: a thread whose stack cannot be mapped ("can't start new thread"),
# oneDNN unable to allocate a kernel's scratch ("could not create a primitive"), C++'s bad_alloc.
CAPPED_ALLOCATION_FAILURES = ("can't start new thread", "could not create a primitive", "bad_alloc")


def of_error(exc: BaseException, framework_says: bool, memory_limited: bool = False) -> str | None:
    """'out of memory (<the error's first line>)' when `exc` is an allocation that failed (`framework_says`:
    the framework's adapter recognised its own out-of-memory error), else None."""
    text = str(exc).lower()
    oom = (
        isinstance(exc, MemoryError)
        or framework_says
        or "out of memory" in text
        or "can't allocate memory" in text
        or (memory_limited and any(m in text for m in CAPPED_ALLOCATION_FAILURES))
    )
    if not oom:
        return None
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"out of memory ({detail})"


def of_signal(signal_name: str | None, memory_limit_mb: int | None) -> str | None:
    """The error of an agent killed by `signal_name` under --memory-limit-mb: native code whose allocation
    fails (an OpenMP thread's stack, a kernel's scratch buffer) often dies by a signal instead of raising,
    so the cap ran out. None without a signal or a cap."""
    if signal_name is None or not memory_limit_mb:
        return None
    return (
        f"out of memory (the agent died by {signal_name} under --memory-limit-mb {memory_limit_mb}: native code "
        "that cannot allocate crashes rather than raising); see log.txt"
    )
