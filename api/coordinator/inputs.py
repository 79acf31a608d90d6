"""Checks of request values that their schema cannot make: they need the caller's address, the
service's settings or the job a request is about. Each raises `api.errors.Invalid` (422) with
what was wrong and what to send instead.

- `check_data_address`: a worker's UDP address, where the switch will send results
- `job_size`: a submission's gradient size, from `gradient_bytes` or `model`, given once
- `check_resubmission`: a retried submission (same ``Idempotency-Key``) has the same body
- `check_progress`: a worker's byte counters, bounded by what its job can really receive
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, ip_address

from api.errors import Conflict, Invalid
from api.schemas import JobCreate, WorkerProgress
from api.store.models import Job
from scheduler.workload import UnknownModel, find_model, model_table

__all__ = [
    "INT64_MAX",
    "check_data_address",
    "check_progress",
    "check_resubmission",
    "fragments_per_iteration",
    "job_size",
    "padded_gradient_bytes",
]

# The store keeps counters in 64-bit BIGINT columns (SQLite INTEGER, PostgreSQL BIGINT).
INT64_MAX = 2**63 - 1


def _source_ipv4(source: str | None) -> IPv4Address | None:
    """The request's source as IPv4 (an IPv4-mapped IPv6 source too), or None."""
    if source is None:
        return None
    try:
        address = ip_address(source)
    except ValueError:
        return None
    if isinstance(address, IPv6Address):
        return address.ipv4_mapped
    return address


def check_data_address(
    host: IPv4Address,
    port: int,
    *,
    source: str | None,
    networks: Sequence[IPv4Network],
    own: Iterable[tuple[str, int]],
) -> None:
    """Refuse a worker address the switch must not send results to.

    Accepted: a unicast `host` that is the request's `source` address or lies in one of the
    admin's worker `networks`, and that is not one of the service's `own` endpoints (its HTTP
    port, the switch's data port, the PS). Otherwise a joined worker could have the switch
    reflect every result of its job at another host, a broadcast or the service itself.
    """
    loc = ("body", "data_host")
    if host.is_unspecified:
        raise Invalid(
            loc,
            f"{host} is not an address the switch can send to: give the address the "
            "worker's socket is bound to (bind one interface, not 0.0.0.0)",
        )
    directed = [net for net in networks if net.prefixlen < 31 and host == net.broadcast_address]
    if host == IPv4Address("255.255.255.255") or directed:
        raise Invalid(loc, f"{host} is a broadcast address; give the worker's unicast address")
    if host.is_multicast:
        raise Invalid(loc, f"{host} is a multicast address; give the worker's unicast address")
    if host.is_reserved:
        raise Invalid(loc, f"{host} is a reserved address; give the worker's unicast address")
    for own_host, own_port in own:
        if port == own_port and (host.is_loopback or str(host) == own_host):
            raise Invalid(
                ("body", "data_port"),
                f"{host}:{port} is the service's own address; give the worker's UDP socket",
            )
    if host == _source_ipv4(source) or any(host in net for net in networks):
        return
    allowed = ", ".join(str(net) for net in networks) or "none configured"
    raise Invalid(
        loc,
        f"{host} is neither this request's source address ({source or 'unknown'}) nor in the "
        f"worker networks ({allowed}): join from the worker's own host, or ask the admin to "
        "add its network to the worker_networks setting",
    )


def job_size(spec: JobCreate, *, limit: int) -> int:
    """The job's gradient bytes: `gradient_bytes`, or the size of `model` in the model table.

    A job has one size, given once: `model` (of the table) or `gradient_bytes` (any other
    model), never both, so the service never schedules one size while the workers send
    another. The size is at most `limit` (the ``max_gradient_bytes`` setting), since every
    worker allocates it whole.
    """
    if spec.model is not None and spec.gradient_bytes is not None:
        raise Invalid(
            ("body", "gradient_bytes"),
            "give model or gradient_bytes, not both: the model's size is its gradient size",
        )
    known: str | None = None
    if spec.model is not None:
        try:
            known = find_model(spec.model)
        except UnknownModel as exc:
            raise Invalid(
                ("body", "model"), f"{exc}; for another model give gradient_bytes alone"
            ) from None
    size = model_table()[known][0] if known is not None else spec.gradient_bytes
    assert size is not None  # JobCreate requires model or gradient_bytes
    if size > limit:
        where = f"model {known!r}'s gradient" if known is not None else "gradient_bytes"
        raise Invalid(
            ("body", "gradient_bytes" if known is None else "model"),
            f"{where} of {size} bytes exceeds this service's limit of {limit} bytes per "
            "worker (setting max_gradient_bytes)",
        )
    return size


def check_resubmission(job: Job, spec: JobCreate, *, gradient_bytes: int) -> None:
    """Refuse a submission that reuses the ``Idempotency-Key`` of `job` with another body: a
    retry must repeat the request, or the client would take the first job for the new one."""
    given = {
        "name": spec.name,
        "n_workers": spec.n_workers,
        "iterations": spec.iterations,
        "gradient_bytes": gradient_bytes,
        "model": spec.model,
        "priority_class": spec.priority_class,
    }
    if spec.window is not None:
        given["window"] = spec.window
    differ = sorted(name for name, value in given.items() if getattr(job, name) != value)
    if differ:
        # 409, not 422: the body is valid; it conflicts with the job the key already names.
        raise Conflict(
            f"this Idempotency-Key was used for job {job.id} with another body ({', '.join(differ)}"
            " differ): a retry must repeat its request; use a new key for a new job",
            state=job.state,
        )


def padded_gradient_bytes(gradient_bytes: int, lanes: int) -> int:
    """Bytes of one iteration's results: the gradient in whole fragments of `lanes` int32s."""
    return fragments_per_iteration(gradient_bytes, lanes) * 4 * lanes


def fragments_per_iteration(gradient_bytes: int, lanes: int) -> int:
    """Fragments of `lanes` int32s that one worker sends per iteration of the gradient."""
    return -(-gradient_bytes // (4 * lanes))


def check_progress(job: Job, worker_id: int, progress: WorkerProgress, *, lanes: int) -> None:
    """Refuse byte counters that a worker of `job` cannot have received, and any report after
    which the job's totals would not fit the store's 64-bit counters.

    Each fragment's result reaches a worker once, from the switch or from the PS, so a worker
    receives at most ``iterations`` times its padded gradient over both counters.
    """
    per_iteration = padded_gradient_bytes(job.gradient_bytes, lanes)
    most = job.iterations * per_iteration
    received = progress.bytes_switch + progress.bytes_ps
    if received > most:
        raise Invalid(
            ("body", "bytes_switch"),
            f"bytes_switch + bytes_ps = {received} exceeds the {most} bytes a worker of job "
            f"{job.id} can receive ({job.iterations} iterations of {per_iteration} bytes)",
        )
    for name in ("bytes_switch", "bytes_ps"):
        # Reports are cumulative: the worker's figure becomes the larger of the two.
        total = sum(
            max(getattr(w, name), getattr(progress, name))
            if w.worker_id == worker_id
            else getattr(w, name)
            for w in job.workers
        )
        if total > INT64_MAX:
            raise Invalid(("body", name), f"job {job.id}'s total {name} would exceed 2**63 - 1")
