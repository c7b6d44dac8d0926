"""A scope's budget (requests and tokens per sliding window) on a fake clock: no Ray, milliseconds."""

from __future__ import annotations

import heapq

import pytest

from cluster.semaphore import Budget, BudgetConfigError, BudgetWindow, LeaseTable, budget_of


def _table(budget: Budget, *, permits: int = 4) -> LeaseTable:
    return LeaseTable("t", permits, 30.0, now=0.0, recovering=False, budget=BudgetWindow(budget))


def test_a_grant_waits_until_the_window_has_room_for_its_reservation() -> None:
    table = _table(Budget(tokens=100, window_s=10.0))
    assert table.request("a", "h", 4, 0.0, tokens=60)[0] == "granted"
    assert table.request("b", "h", 4, 0.0, tokens=60)[0] == "parked"  # 60 + 60 > 100
    _, decided = table.release("a", 1.0, used_tokens=60)
    assert decided == []  # released, but its charge counts a window more
    assert table.tick(10.9) == []
    assert table.tick(11.0) == [("b", "granted")]  # a's charge left the window at 1.0 + 10


def test_a_release_corrects_the_reservation_to_the_usage_reported() -> None:
    table = _table(Budget(tokens=100, window_s=10.0))
    table.request("a", "h", 4, 0.0, tokens=90)
    assert table.request("b", "h", 4, 0.0, tokens=40)[0] == "parked"
    _, decided = table.release("a", 1.0, used_tokens=30)  # 30 + 40 fits
    assert decided == [("b", "granted")]
    stats = table.statistics()["budget"]
    assert stats is not None and stats.tokens_in_window == 70


def test_more_usage_than_reserved_holds_the_next_grants_back_longer() -> None:
    table = _table(Budget(tokens=100, window_s=10.0))
    table.request("a", "h", 4, 0.0, tokens=10)
    table.release("a", 1.0, used_tokens=95)
    assert table.request("b", "h", 4, 2.0, tokens=10)[0] == "parked"
    assert table.tick(11.0) == [("b", "granted")]


def test_a_held_lease_counts_until_its_release_however_long_it_holds() -> None:
    table = _table(Budget(requests=1, window_s=1.0))
    table.request("a", "h", 4, 0.0)
    assert table.request("b", "h", 4, 0.0)[0] == "parked"
    assert table.tick(50.0) == []  # a is still held: its request may not have reached the endpoint yet
    table.release("a", 50.0)
    assert table.tick(51.0) == [("b", "granted")]


def test_requests_per_window_cap_grants_and_the_head_is_never_overtaken() -> None:
    table = _table(Budget(requests=2, tokens=1000, window_s=5.0))
    outcomes = [table.request(f"r{i}", "h", 4, 0.0, tokens=1)[0] for i in range(2)]
    assert outcomes == ["granted", "granted"]
    assert table.request("big", "h", 4, 0.0, tokens=999)[0] == "parked"
    assert table.request("small", "h", 4, 0.0, tokens=2)[0] == "parked"
    table.release("r0", 1.0, used_tokens=1)
    table.release("r1", 1.0, used_tokens=1)
    assert table.tick(6.0) == [("big", "granted")]  # FIFO: small waits behind big
    assert table.budget_wake_at(6.0) is None  # small waits for big's release, not for the clock


def test_the_budget_wait_of_a_grant_is_measured_from_when_the_budget_held_it_back() -> None:
    table = _table(Budget(requests=1, window_s=2.0))
    table.request("a", "h", 4, 0.0)
    table.request("b", "h", 4, 0.5)
    table.release("a", 1.0)
    assert table.budget_wake_at(1.5) == 3.0
    assert table.tick(3.0) == [("b", "granted")]
    assert table.take_budget_wait("b") == pytest.approx(2.5)
    assert table.take_budget_wait("b") == 0.0


def test_a_lease_that_expires_settles_its_charge_with_its_reservation() -> None:
    table = LeaseTable("t", 4, 1.0, now=0.0, recovering=False, budget=BudgetWindow(Budget(tokens=10, window_s=5.0)))
    table.request("a", "h", 4, 0.0, tokens=7)
    table.tick(1.0)  # expired: not renewed
    stats = table.statistics()["budget"]
    assert stats is not None and stats.held == 0 and stats.tokens_in_window == 7
    assert table.request("b", "h", 4, 1.0, tokens=7)[0] == "parked"
    assert table.tick(6.0) == [("b", "granted")]


def test_a_restarted_table_starts_from_the_charges_kept_outside_and_settles_those_nobody_renewed() -> None:
    window = BudgetWindow(Budget(tokens=100, window_s=10.0))
    window.charge("gone", 50, 0.0)  # held at the restart; its holder never renews
    window.charge("back", 40, 0.0)  # held at the restart; its holder renews
    written, _ = window.drain_changes()
    restored = BudgetWindow(window.budget, [e for e in written])
    table = LeaseTable("t", 4, 1.0, now=0.0, recovering=True, budget=restored)
    table.renew([("back", "h", 4, 1, False)], 0.5)
    assert table.request("new", "h", 4, 0.5, tokens=20)[0] == "parked"  # recovering
    assert table.tick(1.0) == []  # serving, but 50 + 40 + 20 > 100
    _, decided = table.release("back", 1.2, used_tokens=10)  # 50 + 10 + 20 fits
    assert decided == [("new", "granted")]
    stats = table.statistics()["budget"]
    assert stats is not None and stats.tokens_in_window == 80


def test_drained_changes_name_the_charges_written_and_those_that_left_the_window() -> None:
    window = BudgetWindow(Budget(tokens=10, window_s=1.0))
    window.charge("a", 3, 0.0)
    assert [e.key for e in window.drain_changes()[0]] == ["a"]
    window.settle("a", 2, 0.5)
    written, removed = window.drain_changes()
    assert [(e.key, e.tokens, e.settled) for e in written] == [("a", 2, True)] and removed == []
    window.prune(1.5)
    assert window.drain_changes() == ([], ["a"])


def test_the_floor_is_one_window_per_budget_after_the_first() -> None:
    budget = Budget(tokens=100, requests=10, window_s=2.0)
    assert budget.floor_s(requests=5, tokens=100) == 0.0
    assert budget.floor_s(requests=5, tokens=250) == 4.0
    assert budget.floor_s(requests=25, tokens=10) == 4.0


@pytest.mark.parametrize(("fields", "named"), [
    ({"tokens": -1}, "tokens"),
    ({"requests": 0}, "requests"),
    ({"window_s": 0}, "window_s"),
    ({"tokens": 10, "reserve_tokens": 11}, "reserve_tokens=11 exceeds tokens=10"),
])
def test_a_bad_budget_is_refused_naming_the_field(fields: dict[str, object], named: str) -> None:
    with pytest.raises(BudgetConfigError, match=named):
        budget_of(**fields)


def test_a_reservation_larger_than_the_whole_budget_is_refused_not_parked_forever() -> None:
    window = BudgetWindow(Budget(tokens=10, window_s=1.0))
    with pytest.raises(BudgetConfigError, match="reserving 11 tokens can never be granted"):
        window.check_fits(11)
    window.check_fits(10)


def _schedule(table: LeaseTable, requests: int, estimate: int, used: int, duration: float) -> list[float]:
    """Grant times of ``requests`` parked at once, each released ``duration`` after its grant
    with ``used`` tokens, on a fake clock that jumps to the next release or budget wake."""
    releases: list[tuple[float, str]] = []
    granted: dict[str, float] = {}

    def note(decided: list[tuple[str, str]], now: float) -> None:
        for lease_id, outcome in decided:
            if outcome == "granted":
                granted[lease_id] = now
                heapq.heappush(releases, (now + duration, lease_id))

    for i in range(requests):
        outcome, decided = table.request(f"r{i}", "h", 4, 0.0, tokens=estimate)
        note(decided + ([(f"r{i}", outcome)] if outcome == "granted" else []), 0.0)
    now = 0.0
    while table.waiting:
        wake = table.budget_wake_at(now)
        if releases and (wake is None or releases[0][0] <= wake):
            now, lease_id = heapq.heappop(releases)
            note(table.release(lease_id, now, used_tokens=used)[1], now)
        else:
            assert wake is not None, "nothing can ever grant the waiting requests"
            now = wake
            note(table.tick(now), now)
    return sorted(granted.values())


def test_a_saturated_budget_grants_within_a_few_percent_of_its_floor() -> None:
    """100 requests reserving 22 tokens and using 19, 10 ms each, at 400 tokens per second:
    the last is granted within 1.05x of the floor (the budget's own waste, without the cap's)."""
    budget = Budget(tokens=400, window_s=1.0)
    table = LeaseTable("t", 4, 30.0, now=0.0, recovering=False, budget=BudgetWindow(budget))
    granted = _schedule(table, 100, estimate=22, used=19, duration=0.01)
    floor = budget.floor_s(requests=100, tokens=100 * 19)
    assert len(granted) == 100 and floor <= granted[-1] - granted[0] <= 1.05 * floor, (granted[-1], floor)
