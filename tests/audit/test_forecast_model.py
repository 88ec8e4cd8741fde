"""The forecast's model on histories whose truth is known: steady growth under noise and bursts, plateaus under
retention, resets, gaps, and the time a disk takes to reach a level when its partitions stop at their caps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mover.audit import threads
from mover.audit.forecast import model as m

GIB = float(1 << 30)


def hourly(days: float, every_h: float = 1.0) -> np.ndarray:
    return np.arange(-days * 24, 0 + 1e-9, every_h)


def test_steady_growth_with_daily_cycle_bursts_and_noise_is_found_within_its_interval() -> None:
    rng = np.random.default_rng(1)
    t = hourly(7)
    rate = 50e6  # bytes/hour
    # Writes follow the day (half again at noon, half less at night); the size is their integral.
    y = 100 * GIB + rate * t + rate * 24 / (2 * math.pi) * 0.5 * np.sin(2 * math.pi * t / 24)
    y = y + rng.normal(0, 20e6, len(t))
    y[100:104] += 3e9  # a burst the snapshot caught mid-way, then retention of a compacted topic took it back
    fit = m.fit_partition(t, y)
    assert fit.kind == m.KIND_TREND
    assert abs(fit.rate - rate) < 0.03 * rate
    assert fit.rate - m.Z95 * fit.se < rate < fit.rate + m.Z95 * fit.se
    # Least squares follows the burst; the naive last-two slope follows the noise.
    assert fit.se > 0 and fit.points == len(t)


def test_a_partition_at_its_retention_bytes_is_a_plateau() -> None:
    t = hourly(7)
    y = np.minimum(10 * GIB + 100e6 * (t + 168), 20 * GIB)  # reached its 20 GiB limit on day 4
    y = y - (np.arange(len(t)) % 10) * 1e7 * (y >= 20 * GIB)  # segment deletions: the sawtooth of a full log
    fit = m.fit_partition(t, y, retention_bytes=20 * GIB)
    assert fit.kind == m.KIND_PLATEAU and fit.rate == 0.0
    # The same history without the setting: growth stopped, seen in the data.
    fit = m.fit_partition(t, y)
    assert fit.kind == m.KIND_PLATEAU and fit.rate < 5e6


def test_a_growing_partition_stops_at_its_cap_in_the_projection() -> None:
    t = hourly(3)
    y = 5 * GIB + 100e6 * (t + 72)
    fit = m.fit_partition(t, y, retention_bytes=20 * GIB)
    assert fit.kind == m.KIND_TREND and fit.cap == 20 * GIB
    rates = np.array([fit.rate])
    rooms = np.array([m.room(fit.rate, fit.cap, fit.size_now)])
    # 12.6 GB now: it grows by the 8.9 GB of room it has left, then no more.
    assert abs(m.growth(rates, rooms, 1000) - (20 * GIB - fit.size_now)) < 1
    assert m.growth(rates, rooms, 10) == 10 * fit.rate
    # Past its limit (a limit lowered since): a plateau, nothing more.
    assert m.fit_partition(t, y, retention_bytes=10 * GIB).kind == m.KIND_PLATEAU
    # Under retention.ms of a day, a log written at 100 MB/h holds 2.4 GB.
    assert m.retention_cap(100e6, None, 86_400_000) == 2.4e9


def test_a_reset_starts_the_history_again() -> None:
    t = hourly(4)
    y = np.where(t < -30, 50 * GIB + 1e9 * (t + 96), 1e8 * (t + 30) + 1e6)
    fit = m.fit_partition(t, y)
    assert abs(fit.rate - 1e8) < 1e6 and fit.fit_from >= -30


def test_gaps_are_missing_points_not_zeros() -> None:
    t = hourly(5)
    y = 2 * GIB + 30e6 * (t + 120)
    keep = (t < -80) | (t > -60)  # the broker was down for 20 hours: no rows, not rows of 0
    fit = m.fit_partition(t[keep], y[keep])
    assert abs(fit.rate - 30e6) < 1e3


def test_time_to_a_level_with_partitions_stopping_at_their_caps() -> None:
    rates = np.array([10.0, 5.0, -1.0])
    rooms = np.array([100.0, math.inf, -20.0])  # the first stops after 10 h, the third is at nothing after 20 h
    # 0-10 h: 14/h -> 140; 10-20 h: 4/h -> 180; then 5/h.
    assert m.hours_to(140, rates, rooms) == 10.0
    assert abs(m.hours_to(160, rates, rooms) - 15.0) < 1e-9
    assert abs(m.hours_to(230, rates, rooms) - 30.0) < 1e-9
    assert m.hours_to(100, np.array([1.0]), np.array([50.0])) == math.inf
    assert m.hours_to(0, rates, rooms) == 0.0


def test_disk_forecast_and_its_interval() -> None:
    f = m.forecast_disk(used=800.0, total=1000.0, rates=np.array([5.0, 5.0]), rooms=np.array([math.inf] * 2),
                        se=1.0)
    assert f.rate == 10.0 and f.hours_to_90 == 10.0 and f.hours_to_full == 20.0
    assert f.hours_to_90_early < f.hours_to_90 < f.hours_to_90_late
    assert abs(f.hours_to_90_early - 100 / (10 + m.Z95)) < 1e-9
    # Nothing grows: never, unless the interval's early end grows.
    f = m.forecast_disk(used=800.0, total=1000.0, rates=np.array([0.0]), rooms=np.array([0.0]), se=0.0)
    assert f.hours_to_90 == math.inf and f.hours_to_90_early == math.inf
    # Unknown size: no time, never guessed.
    f = m.forecast_disk(used=800.0, total=None, rates=np.array([1.0]), rooms=np.array([math.inf]), se=0.1)
    assert math.isnan(f.hours_to_90) and f.rate == 1.0
    # Already past 90%.
    f = m.forecast_disk(used=950.0, total=1000.0, rates=np.array([1.0]), rooms=np.array([math.inf]), se=0.1)
    assert f.hours_to_90 == 0.0 and f.hours_to_full == 50.0


def test_disk_rate_error_keeps_what_partitions_share() -> None:
    t = hourly(3)
    cycle = np.sin(2 * math.pi * t / 24) * 1e8
    # Two partitions with the same daily cycle: their residuals add, they do not cancel.
    se_shared = m.disk_rate_se(np.array([1.0, 1.0]), t, 2 * cycle)
    se_one = m.disk_rate_se(np.array([1.0]), t, cycle)
    assert abs(se_shared - 2 * se_one) < 1e-6 * se_one
    assert m.disk_rate_se(np.array([3.0, 4.0]), np.array([]), np.array([])) == 5.0


def test_many_partitions_at_once_fit_as_each_alone() -> None:
    """fit_rows (the compact history's batch fit) gives fit_partition's numbers for every kind of row: growing,
    flat, plateaued in the data or under retention.bytes, shrinking, with gaps, reset, too short."""
    rng = np.random.default_rng(7)
    t = np.arange(-29.0, 1.0) * 24
    b = 400
    rates = rng.lognormal(17, 1.5, b) * rng.choice([1, 1, 1, 0, -0.2], b)
    y = 50 * GIB + rates[:, None] * (t - t[0]) + rng.normal(0, 1e7, (b, len(t)))
    y[:40, 20:] = y[:40, 20:21]  # stopped growing two thirds in: a plateau seen in the data
    y[40:50, 5:9] = np.nan  # missing from some snapshots
    y[50:55, 15:] *= 0.1  # a reset
    y[55:60, :-2] = np.nan  # seen twice only
    retention_bytes = np.where(np.arange(b) % 7 == 0, 60 * GIB, -1).astype(float)
    retention_ms = np.where(np.arange(b) % 11 == 0, 3.6e9, np.nan)
    together = m.fit_rows(t, y, retention_bytes, retention_ms)
    kinds = set()
    for k in range(b):
        seen = np.isfinite(y[k])
        alone = m.fit_partition(t[seen], y[k, seen], None if retention_bytes[k] is None else retention_bytes[k],
                                None if math.isnan(retention_ms[k]) else retention_ms[k])
        kinds.add(alone.kind)
        for field in ("rate", "slope", "se", "intercept", "fit_from", "size_now", "cap"):
            a, b_ = getattr(together[k], field), getattr(alone, field)
            assert (math.isnan(a) and math.isnan(b_)) or a == pytest.approx(b_, rel=1e-9, abs=1e-6), (k, field)
        assert (together[k].kind, together[k].points) == (alone.kind, alone.points), k
    assert kinds == {m.KIND_TREND, m.KIND_PLATEAU, m.KIND_SHORT}


def test_row_medians_and_slopes_in_steps_are_numpys(monkeypatch: pytest.MonkeyPatch) -> None:
    """row_medians is np.median along rows (odd and even widths, ties, a nan, one point), and the pairs' median
    slopes found SLOPE_ROWS rows at a time are the ones found at once."""
    rng = np.random.default_rng(11)
    for width in (1, 2, 7, 10, 11, 30, 31):
        a = rng.normal(0, 1e6, (300, width)).round(-3)  # rounded: ties among a row's values
        a[17, width // 2] = np.nan
        a[18] = 5.0
        assert np.array_equal(m.row_medians(a), np.median(a, axis=1), equal_nan=True), width
    for points in (31, 32):  # an odd and an even number of pairs
        t = np.arange(1.0 - points, 1.0) * 24 + rng.uniform(0, 1, points)
        y = rng.normal(0, 1e6, (1000, points)).cumsum(axis=1)
        whole = m._median_slopes(t, y)
        with monkeypatch.context() as patched:
            patched.setattr(m, "SLOPE_ROWS", 64)
            assert np.array_equal(m._median_slopes(t, y), whole)
        assert np.array_equal(whole[:20], [m.theil_sen(t, row)[0] for row in y[:20]])
    # Rows whose residuals' median deviation is 0 (one point off a flat line) take their standard deviation.
    t = np.arange(10.0)
    y = np.vstack([np.zeros(10), rng.normal(0, 1, 10), np.r_[np.zeros(9), 100.0]])
    zeros = np.zeros(3)
    se, sigma = m.slope_se_rows(t, y, zeros, zeros)
    assert sigma[0] == 0 and sigma[2] == np.std(y[2]) and sigma[1] == 1.4826 * np.median(np.abs(y[1] - np.median(y[1])))
    assert np.array_equal(se[[0, 2]], [m.slope_se(t, y[0], 0.0, 0.0), m.slope_se(t, y[2], 0.0, 0.0)])


def test_slopes_guessed_are_the_slopes_found() -> None:
    """A guess at a row's Theil-Sen slope (a kept fit's, refitted by age) changes no answer, right or wrong: odd
    and even numbers of pairs, ties, two middles that differ (a guess at one of them, or at their mean, is not the
    answer), nan; and a right guess is taken without sorting the row's pairs."""
    rng = np.random.default_rng(5)
    for points in (4, 31, 32):  # 6, 465 and 496 pairs
        t = np.arange(1.0 - points, 1.0) * 24
        y = np.vstack([
            1e9 + 5_000.0 * np.arange(points)[None, :].repeat(50, axis=0) * rng.integers(1, 4, (50, 1)),  # ties
            rng.normal(0, 1e6, (50, points)).cumsum(axis=1).round(),  # every slope its own
            np.full((10, points), 7e8),  # flat: every slope 0
        ])
        right = m._median_slopes(t, y)
        by_lag = np.vstack([(y[:, k:] - y[:, :-k]).T / (t[k:] - t[:-k])[:, None] for k in range(1, points)])
        ordered = np.sort(by_lag, axis=0)
        low, high = ordered[(len(by_lag) - 1) // 2], ordered[len(by_lag) // 2]
        for guess in (right, right * (1 + 1e-12) + 1e-9, low, high, (low + high) / 2, np.full(len(y), np.nan),
                      np.where(np.arange(len(y)) % 2 == 0, right, rng.normal(0, 1e4, len(y)))):
            assert np.array_equal(m._median_slopes(t, y, guess), right), points
            out, missed = m._guessed(by_lag.T, guess)
            hit = np.setdiff1d(np.arange(len(y)), missed)
            assert np.array_equal(out[hit], right[hit])
        _, missed = m._guessed(by_lag.T, right)
        # Every right guess found by counting, but where it is the mean of two middles that differ (no pair's).
        assert np.array_equal(missed, np.flatnonzero(low != high)), points
    fitted = m.fit_matrix(t, y, np.full(len(y), -1.0), np.full(len(y), np.nan))
    again = m.fit_matrix(t, y, np.full(len(y), -1.0), np.full(len(y), np.nan),
                         guesses=(fitted["whole_slope"], fitted["recent_slope"] + 1.0))
    for field in (*m.FIT_FIELDS, *m.KEPT_FIELDS):
        assert np.array_equal(again[field], fitted[field], equal_nan=field != "kind"), field


def test_a_carried_fit_is_its_fit_moved_on_with_what_the_newest_point_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """carry_matrix (a kept fit carried whole to a newer grid): on the grid it was fitted on it is fit_matrix's
    answer, field for field; one day on, its line is the same line, and a partition that reached its
    retention.bytes meanwhile has settled (a plateau at its cap, rate 0), as a new fit would."""
    rng = np.random.default_rng(3)
    t = np.arange(-29.0, 1.0) * 24
    b = 300
    rates = rng.lognormal(17, 1.5, b) * rng.choice([1, 1, 0, -0.2], b)
    y = 50 * GIB + rates[:, None] * (t - t[0]) + rng.normal(0, 1e7, (b, len(t)))
    y[:40, 20:] = y[:40, 20:21]  # plateaus seen in the data
    retention_ms = np.where(np.arange(b) % 11 == 0, 3.6e9, np.nan)
    whole = m.whole_rows(t, y)  # (a fast shrinking one falls by half: a reset, fitted from there alone)
    assert whole.sum() > b / 2
    y, retention_ms = y[whole], retention_ms[whole]
    retention_bytes = np.full(len(y), -1.0)
    fit = m.fit_matrix(t, y, retention_bytes, retention_ms)
    carried = m.carry_matrix(t, y, retention_bytes, retention_ms, fit["whole_slope"], fit["recent_slope"],
                             fit["slope"], fit["intercept"], fit["se"], fit["sigma"])
    for field in (*m.FIT_FIELDS, *m.KEPT_FIELDS):
        if field == "kind":
            assert (carried[field] == fit[field]).all()
        else:
            np.testing.assert_allclose(carried[field], fit[field], rtol=1e-12, err_msg=field)
    # A day on: the oldest point leaves, a new one on each line arrives; the fastest growing is now past a cap.
    t2 = t + 24
    y2 = np.column_stack([y[:, 1:], fit["intercept"] + fit["slope"] * 24])
    fastest = int(np.argmax(fit["slope"]))
    assert fit["kind"][fastest] == m.KIND_TREND
    retention_bytes[fastest] = y2[fastest, -1] - 1
    on = m.carry_matrix(t2 - t2[-1], y2, retention_bytes, retention_ms, fit["whole_slope"], fit["recent_slope"],
                        fit["slope"], fit["intercept"] + fit["slope"] * 24, fit["se"], fit["sigma"])
    np.testing.assert_allclose(on["intercept"], y2[:, -1], rtol=1e-12)
    np.testing.assert_allclose(on["size_now"], y2[:, -1])
    assert on["kind"][fastest] == m.KIND_PLATEAU and on["rate"][fastest] == 0
    assert (on["kind"][np.arange(len(y)) != fastest] == fit["kind"][np.arange(len(y)) != fastest]).all()

    # Settled a step at a time on two threads (as past SETTLE_ROWS rows; steps of 7 rows, the last one short): the
    # same answer, field for field.
    monkeypatch.setattr(m, "SETTLE_ROWS", 8)
    monkeypatch.setattr(m, "SETTLE_STEP", 7)
    assert len(y2) % 7
    monkeypatch.setattr(threads, "workers", lambda: 2)
    halves = m.carry_matrix(t2 - t2[-1], y2, retention_bytes, retention_ms, fit["whole_slope"], fit["recent_slope"],
                            fit["slope"], fit["intercept"] + fit["slope"] * 24, fit["se"], fit["sigma"])
    assert halves.keys() == on.keys()
    for field, values in on.items():
        assert np.array_equal(halves[field], values, equal_nan=values.dtype.kind == "f"), field


def test_a_refreshed_fit_keeps_its_line_and_has_its_points_error_and_sigma_now() -> None:
    """A carried fit refreshed by age (forecast_kept.refresh): its slopes, line and age stay; its sigma and slope's
    error are fit_matrix's for that line on its points now (a plateau's from the window's recent third), not the ones
    kept; and only fits carried past a multiple of REFRESH_AFTER, short of REFIT_AFTER, are due."""
    from mover.audit.forecast import kept as forecast_kept

    rng = np.random.default_rng(8)
    t = np.arange(-30.0, 1.0) * 24
    trend = 1e9 + 2e6 * (t - t[0]) + rng.normal(0, 5e5, len(t))
    flat = np.r_[1e9 + 2e6 * (t[:21] - t[0]), np.full(10, 1e9 + 2e6 * (t[20] - t[0]))] + rng.normal(0, 5e5, len(t))
    y = np.vstack([trend, flat])
    found = m.fit_matrix(t, y, np.full(2, np.nan), np.full(2, np.nan))
    assert found["recent_slope"][1] < m.PLATEAU_SHARE * found["whole_slope"][1]  # the second is a plateau
    kept = np.full((2, len(forecast_kept.KEPT)), np.nan)
    since = -24.0  # the kept lines' value at the grid's previous newest snapshot
    for j, name in enumerate(("whole_slope", "recent_slope", "slope")):
        kept[:, j] = found[name]
    kept[:, 3] = found["intercept"] + found["slope"] * since
    kept[:, 4], kept[:, 5], kept[:, 6], kept[:, 7] = 1.0, 31.0, 7.0, 2.0  # an old sigma and error
    before = kept.copy()
    forecast_kept.refresh(kept, np.arange(2), t, y, since)
    others = [j for j in range(len(forecast_kept.KEPT)) if j not in (4, 7)]
    assert np.array_equal(kept[:, others], before[:, others])
    np.testing.assert_allclose(kept[:, 4], found["sigma"], rtol=1e-9)
    np.testing.assert_allclose(kept[:, 7], found["se"], rtol=1e-9)
    ages = np.array([0.0, 30.0, 31.0, 31.0, forecast_kept.REFIT_AFTER - 1.0, np.nan])
    table = np.full((len(ages), len(forecast_kept.KEPT)), 1.0)
    table[:, 5] = ages
    table[5, 0] = np.nan  # no fit kept
    due = forecast_kept.refresh_due(table, 1)
    assert due.tolist() == [False, False, forecast_kept.REFRESH_AFTER == 32, forecast_kept.REFRESH_AFTER == 32,
                            False, False]
