"""The per-process heartbeat: renews every lease this process holds on one service actor.

One heartbeat per process per service (``heartbeat_for``), whatever the number of scopes:
each renewal is one call carrying the leases of every scope, grouped by scope with the
scope's configuration (so a restarted service can rebuild the table, see ``_service``).
Its daemon thread runs only while leases are held, so sync and async callers alike keep
their leases alive; it renews every third of the shortest TTL among the scopes it renews.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from cluster.connect import SOLOIST_NAMESPACE, wait_ref
from cluster.process import Table, process_registry
from cluster.semaphore._models import Lease
from cluster.semaphore._scope import ScopeKey

__all__ = ["Heartbeat", "heartbeat_for", "heartbeats_of", "held_by_this_process", "actor_gone", "note_acquiring", "done_acquiring",
           "renew_held_leases"]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}


def actor_gone(name: str, actor_id: str) -> bool:
    """True when the named actor no longer exists, or the name now belongs to another one."""
    try:
        current = ray.get_actor(name, namespace=SOLOIST_NAMESPACE)
    except ValueError:
        return True
    # ActorHandle has no public id accessor; _actor_id is stable across Ray releases.
    return current._actor_id.hex() != actor_id


class Heartbeat:
    """Renews the leases this process holds on one service actor (see the module docstring).

    The thread waits with ``wait_ref``: in an async actor (a replica) ``ray.get`` would warn.
    """

    def __init__(self, name: str, actor_id: str, handle: Any) -> None:
        self._name = name
        self._actor_id = actor_id
        self._handle = handle
        self._lock = threading.Lock()
        # Leases granted to this process and not yet released; exactly the set renewed.
        self._leases: dict[str, Lease] = {}
        # scope -> the key its renewals carry (never one that creates the scope).
        self._keys: dict[str, ScopeKey] = {}
        # lease_id -> local monotonic time until which the service surely still holds it
        # (the send time of the last renewal it confirmed, plus its scope's ttl).
        self._confirmed_until: dict[str, float] = {}
        # This process's actor, when it holds guarded leases (sent with renewals, so a
        # restarted service can probe it again).
        self._owner: Any = None
        # The running renewal thread, or None when no lease is held.
        self._thread: threading.Thread | None = None
        # The period the thread waits now; a lease of a scope with a shorter TTL wakes it.
        self._period = 0.0
        self._wake = threading.Event()
        self._stopped = threading.Event()

    def add(self, lease: Lease, key: ScopeKey, since: float, owner: Any = None) -> None:
        """Start renewing ``lease`` (granted by a request sent at local time ``since``)."""
        with self._lock:
            self._leases[lease.lease_id] = lease
            self._keys[lease.scope] = key._replace(create=False)
            self._confirmed_until[lease.lease_id] = since + key.ttl_s
            if owner is not None:
                self._owner = owner
            if self._thread is not None and key.ttl_s / 3 < self._period:
                self._wake.set()  # its current wait is longer than this lease can go unrenewed
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(target=self._run, name=f"sem-heartbeat:{self._name}", daemon=True)
                self._thread.start()

    def discard(self, lease_id: str) -> None:
        """Stop renewing ``lease_id`` (before it is released, so it cannot be revived)."""
        with self._lock:
            gone = self._leases.pop(lease_id, None)
            self._confirmed_until.pop(lease_id, None)
            if gone is not None and all(lease.scope != gone.scope for lease in self._leases.values()):
                self._keys.pop(gone.scope, None)  # no lease of its scope left: nothing to renew there

    def drop_scope(self, scope: str) -> None:
        """Stop renewing every lease of ``scope`` (its table is gone)."""
        with self._lock:
            for lease_id in [lid for lid, lease in self._leases.items() if lease.scope == scope]:
                del self._leases[lease_id]
                self._confirmed_until.pop(lease_id, None)
            self._keys.pop(scope, None)

    def holds(self, lease: Lease) -> bool:
        """Whether ``lease`` is surely still held: not reported lost, same generation, and
        (unless guarded) confirmed by a renewal less than two thirds of its ttl ago."""
        with self._lock:
            mine = self._leases.get(lease.lease_id)
            if mine is None or mine.generation != lease.generation:
                return False
            if lease.guarded:
                return True
            ttl_s = self._keys[lease.scope].ttl_s
            return time.monotonic() < self._confirmed_until.get(lease.lease_id, 0.0) - ttl_s / 3

    def held_ids(self, lease_ids: list[str]) -> list[bool]:
        """For a probe: which of ``lease_ids`` this process holds."""
        with self._lock:
            return [lease_id in self._leases for lease_id in lease_ids]

    def stop(self) -> None:
        """Forget every lease and end the thread (the actor is gone)."""
        self._stopped.set()
        self._wake.set()
        with self._lock:
            self._leases.clear()
            self._confirmed_until.clear()

    def _interval(self) -> float:
        """A third of the shortest TTL among the scopes renewed (caller holds the lock)."""
        scopes = {lease.scope for lease in self._leases.values()}
        return min((self._keys[s].ttl_s for s in scopes), default=10.0) / 3

    def _pause(self, wait: float) -> bool:
        """Wait ``wait`` seconds (cut short by a shorter TTL); False once stopped."""
        with self._lock:
            # Leases added since ``wait`` was chosen may need it shorter; later ones wake it.
            wait = min(wait, self._interval()) if self._leases else wait
            self._period = wait
        self._wake.wait(wait)
        self._wake.clear()
        return not self._stopped.is_set()

    def _run(self) -> None:
        with self._lock:
            wait = self._interval()
        while self._pause(wait):
            with self._lock:
                interval = self._interval()
                if not self._leases:
                    self._thread = None
                    return
            outcome = self._renew_once(interval)
            if outcome is None:
                return
            wait = interval if outcome else interval / 4  # after a failed renewal, try again soon

    def renew_now(self) -> bool:
        """Renew every lease held now, at once, and return once the service answered (True),
        or False when it could not be reached in time (see ``renew_held_leases``)."""
        with self._lock:
            interval = self._interval()
        return bool(self._renew_once(interval))

    def _renew_once(self, interval: float) -> bool | None:
        """One renewal of every lease held: True when the service answered, False to try
        again soon, None when the service is gone for good (the leases are dropped)."""
        with self._lock:
            batch = list(self._leases.values())
            if not batch:
                return True
            live = {lease.scope for lease in batch}
            self._keys = {scope: key for scope, key in self._keys.items() if scope in live}
            keys = dict(self._keys)
            owner = self._owner
        by_scope: dict[str, list[Lease]] = {}
        for lease in batch:
            by_scope.setdefault(lease.scope, []).append(lease)
        renewals = [
            (keys[scope], [(x.lease_id, x.holder, x.limit, x.generation, x.guarded) for x in leases])
            for scope, leases in by_scope.items()
        ]
        sent = time.monotonic()
        try:
            answers: list[list[bool]] = wait_ref(self._handle.renew.remote(renewals, owner), timeout=interval)
        except GetTimeoutError:
            logger.warning("semaphore service %s: lease renewal took longer than %.2fs; retrying",
                           self._name, interval, extra=_LOG_EXTRA)
            return False
        except RayActorError:
            if actor_gone(self._name, self._actor_id):
                logger.error("semaphore service %s: actor is gone; %d leases of this process dropped",
                             self._name, len(batch), exc_info=True, extra=_LOG_EXTRA)
                self._forget_self()
                return None
            logger.info("semaphore service %s: actor unreachable (restarting?); will renew again",
                        self._name, exc_info=True, extra=_LOG_EXTRA)
            return False
        for (key, _), leases, results in zip(renewals, by_scope.values(), answers):
            self._reconcile(key, leases, results, sent)
        return True

    def _reconcile(self, key: ScopeKey, batch: list[Lease], results: list[bool], sent: float) -> None:
        revived: list[str] = []
        with self._lock:
            for lease, renewed in zip(batch, results):
                held_here = lease.lease_id in self._leases
                if renewed and held_here:
                    self._confirmed_until[lease.lease_id] = sent + key.ttl_s
                if not renewed and held_here:
                    del self._leases[lease.lease_id]
                    self._confirmed_until.pop(lease.lease_id, None)
                    logger.warning("semaphore %r: lease %s of %s was lost (expired before renewal)",
                                   key.scope, lease.lease_id, lease.holder, extra=_LOG_EXTRA)
                elif renewed and not held_here:
                    revived.append(lease.lease_id)  # released while this renewal was in flight
        for lease_id in revived:
            try:
                wait_ref(self._handle.release.remote(key, lease_id), timeout=key.ttl_s / 3)
            except (GetTimeoutError, RayActorError):
                logger.warning("semaphore %r: could not re-release lease %s; it expires in ttl",
                               key.scope, lease_id, exc_info=True, extra=_LOG_EXTRA)
            except Exception:  # the scope's table is gone: nothing left to release
                logger.info("semaphore %r: lease %s not re-released: %s", key.scope, lease_id,
                            "its table is gone", exc_info=True, extra=_LOG_EXTRA)

    def _forget_self(self) -> None:
        self.stop()
        _HEARTBEATS.discard((self._name, self._actor_id), self)


# (service name, actor id) -> the heartbeat of this process for that actor, in the
# per-process registry (see ``cluster.process``).
_HEARTBEATS: Table[tuple[str, str], Heartbeat] = process_registry().semaphore_heartbeats


def heartbeat_for(name: str, actor_id: str, handle: Any) -> Heartbeat:
    """This process's heartbeat for the service ``name`` (incarnation ``actor_id``)."""
    return _HEARTBEATS.get_or_create((name, actor_id), lambda: Heartbeat(name, actor_id, handle))


def heartbeats_of(name: str) -> list[Heartbeat]:
    """This process's heartbeats for the service ``name`` (usually one)."""
    return _HEARTBEATS.select(lambda key: key[0] == name)


# Guarded leases this process has asked for and not yet added to a heartbeat (or given up):
# the service may have granted one already while its answer is still on its way here. A probe
# must count such a lease as held: answered "not held", the service would free a permit whose
# work is about to run (a late report of this actor's previous incarnation triggers exactly
# that probe), and one more body than the cap would run.
_ACQUIRING: set[str] = set()
_ACQUIRING_LOCK = threading.Lock()


def note_acquiring(lease_id: str) -> None:
    """This process is asking for guarded lease ``lease_id`` (until ``done_acquiring``)."""
    with _ACQUIRING_LOCK:
        _ACQUIRING.add(lease_id)


def done_acquiring(lease_id: str) -> None:
    """The request for ``lease_id`` ended: granted (and added to a heartbeat) or given up."""
    with _ACQUIRING_LOCK:
        _ACQUIRING.discard(lease_id)


def renew_held_leases() -> bool:
    """Renew every lease this process holds, on every service, now; True once each service
    answered. A restarted service asks this of the owners it knew before its restart (see
    ``_service``): it grants nothing until their leases are registered again."""
    return all([beat.renew_now() for beat in _HEARTBEATS.select(lambda _key: True)])


def held_by_this_process(lease_ids: list[str]) -> list[bool]:
    """Which of ``lease_ids`` this process holds (the answer an owner gives a probe): those its
    heartbeats renew, and those it is still acquiring (granted, perhaps, with the answer on its
    way)."""
    with _ACQUIRING_LOCK:
        answers = [lease_id in _ACQUIRING for lease_id in lease_ids]
    for beat in _HEARTBEATS.select(lambda _key: True):
        answers = [a or b for a, b in zip(answers, beat.held_ids(lease_ids))]
    return answers
