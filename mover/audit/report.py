"""report: one self-contained HTML file from an audit's findings (and a plan): opens anywhere with no network.

The plots are matplotlib figures saved as SVG and put inline in the page; the style sheet is inline; there is no
script. It reads the audit's small outputs (one row per disk and per broker) with pandas: no Spark.
"""

from __future__ import annotations

import argparse
import html
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mover.admin.common import format_bytes
from mover.audit import balance, plan_layout
from mover.audit.errors import AuditError
from mover.audit.forecast import layout as forecast_layout

WORST_PLOTTED = 8

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { padding: .25em .7em; border-bottom: 1px solid #eee; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.figure svg { max-width: 100%; height: auto; }
.bad { color: #b00020; font-weight: 600; } .ok { color: #1b7f3b; }
.note { color: #555; }
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--audit", required=True, metavar="DIR", help="an audit's output directory")
    parser.add_argument("--plan", metavar="PLANDIR", help="a plan of the same snapshot, shown before/after")
    parser.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write")


def run(args: argparse.Namespace) -> int:
    write_page(render(Path(args.audit), Path(args.plan) if args.plan else None), Path(args.out))
    return 0


def write_page(page: str, out: Path) -> None:
    try:
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(out)  # a browser or a mail job sees the old page or the whole new one
    except OSError as e:
        raise AuditError(f"cannot write {out}: {e.strerror or e}") from None
    print(f"Report written to {out.resolve()}")


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except FileNotFoundError:
        raise AuditError(f"{path} is missing: is {path.parent} an audit's (or a plan's) output?") from None
    except Exception as e:  # pyarrow's errors for a file that is not Parquet have no common base
        raise AuditError(f"cannot read {path}: {audit_first_line(e)}") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AuditError(f"{path} is missing: is {path.parent} an audit's (or a plan's) output?") from None
    except (OSError, ValueError) as e:
        raise AuditError(f"cannot read {path}: {audit_first_line(e)}") from None


def audit_first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _svg(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG lives inside HTML


def prefetch() -> None:
    """Imports matplotlib's pyplot in a thread (half a second), for a command that renders the report after its
    Spark work: the import runs while the driver waits for its JVM."""
    import threading

    threading.Thread(target=_matplotlib, name="report-imports", daemon=True).start()


def _matplotlib() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "mover-audit", "figure.dpi": 96,
                                "font.size": 10})
    import matplotlib.pyplot as plt

    return plt


def plot_distribution(disks: pd.DataFrame, t: balance.Thresholds) -> str:
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    known = disks[disks["online"] & disks["percent"].notna()]
    if len(known):
        ax.hist(known["percent"], bins=min(60, max(10, len(known) // 20)), color="#4c78a8")
        ax.axvline(t.capacity * 100, color="#b00020", linestyle="--", label=f"capacity threshold {t.capacity:.0%}")
        ax.set_xlabel("disk usage, % of the disk")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no disk reports its size", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("disks")
    ax.set_title(f"Disk usage across the fleet ({len(known)} disks of known size)")
    return _svg(fig)


def plot_deviation(disks: pd.DataFrame, t: balance.Thresholds, after: pd.DataFrame | None = None) -> str:
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    online = disks[disks["online"]]
    bins = np.linspace(-0.6, 0.6, 61)
    ax.hist(online["deviation"].clip(-0.6, 0.6) * 100, bins=bins * 100, color="#4c78a8", alpha=0.75,
            label="before" if after is not None else "disks")
    if after is not None:
        dev = (after["load_after"] / after["avg_after"] - 1).where(after["online"] & ~after["drained"])
        ax.hist(dev.dropna().clip(-0.6, 0.6) * 100, bins=bins * 100, color="#f58518", alpha=0.75,
                label="after the plan")
    for x in (-t.half_width, t.half_width):
        ax.axvline(x * 100, color="#1b7f3b", linestyle="--")
    ax.set_xlabel("deviation from the broker's average, % (dashed: the band)")
    ax.set_ylabel("disks")
    ax.legend()
    ax.set_title("Every disk against its broker's average" + (": before and after the plan" if after is not None
                                                              else ""))
    return _svg(fig)


def plot_cluster_spread(brokers: pd.DataFrame, t: balance.Thresholds) -> str:
    plt = _matplotlib()
    clusters = sorted(brokers["cluster"].unique())
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.35 * len(clusters) + 1.2)))
    data = [brokers.loc[brokers["cluster"] == c, "max_mean_ratio"].dropna().to_numpy() for c in clusters]
    ax.boxplot([d if len(d) else np.array([np.nan]) for d in data], orientation="horizontal", tick_labels=clusters,
               flierprops={"markersize": 3})
    ax.axvline(1 + t.half_width, color="#1b7f3b", linestyle="--", label="band's upper edge")
    ax.set_xlabel("max / mean disk usage per broker")
    ax.set_title("Spread per cluster (one box per cluster, one point per broker)")
    ax.legend(loc="lower right")
    return _svg(fig)


def plot_worst(disks: pd.DataFrame, brokers: pd.DataFrame, after: pd.DataFrame | None = None) -> str:
    plt = _matplotlib()
    worst = brokers.head(WORST_PLOTTED)
    fig, ax = plt.subplots(figsize=(10, 4))
    x = 0.0
    ticks, labels = [], []
    for row in worst.itertuples():
        d = disks[(disks["cluster"] == row.cluster) & (disks["broker"] == row.broker)]
        d = d.sort_values("log_dir")
        value = d["percent"] if row.basis == balance.BASIS_CAPACITY else d["deviation"] * 100 + 100
        n = len(d)
        xs = x + np.arange(n)
        colors = np.where(~d["online"], "#999999", np.where(d["out_of_band"], "#e45756", "#4c78a8"))
        width = 0.4 if after is not None else 0.8
        ax.bar(xs - (0.2 if after is not None else 0), value.fillna(0), width=width, color=colors)
        if after is not None:
            a = after[(after["cluster"] == row.cluster) & (after["broker"] == row.broker)].sort_values("log_dir")
            va = a["percent_after"] if row.basis == balance.BASIS_CAPACITY else a["load_after"] / a["avg_after"] * 100
            ax.bar(xs + 0.2, va.fillna(0), width=0.4, color="#f58518")
        band_low, band_high = d["band_low"].iloc[0], d["band_high"].iloc[0]
        if row.basis != balance.BASIS_CAPACITY:
            band_low, band_high = band_low / d["avg"].iloc[0] * 100, band_high / d["avg"].iloc[0] * 100
        if not (math.isnan(band_low) or math.isnan(band_high)):
            ax.fill_between([x - 0.5, x + n - 0.5], band_low, band_high, color="#1b7f3b", alpha=0.15, linewidth=0)
        ticks.append(x + (n - 1) / 2)
        labels.append(f"{row.cluster}\nbroker {row.broker}")
        x += n + 1.5
    ax.set_xticks(ticks, labels, fontsize=8)
    ax.set_ylabel("% of the disk (or % of the broker's mean)")
    title = "Worst brokers, one bar per disk (red: out of band; green: the band)"
    if after is not None:
        title += "; orange: after the plan"
    ax.set_title(title)
    return _svg(fig)


def _table(frame: pd.DataFrame, columns: dict[str, str], limit: int = 20) -> str:
    head = "".join(f"<th>{html.escape(label)}</th>" for label in columns.values())
    rows = []
    for record in frame.head(limit).to_dict("records"):
        cells = []
        for column in columns:
            value = record.get(column)
            if isinstance(value, float):
                text = "unknown" if math.isnan(value) else f"{value:,.2f}"
            elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                text = f"{int(value):,}"
            else:
                text = "" if value is None else str(value)
            cells.append(f"<td>{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _with_after(plan_disks: pd.DataFrame) -> pd.DataFrame:
    """The plan's disks with each broker's mean load after (a drained disk is out of the mean)."""
    d = plan_disks.copy()
    online = d["online"] & ~d["drained"]
    d["avg_after"] = d["load_after"].where(online).groupby([d["cluster"], d["broker"]]).transform("mean")
    return d


def plot_plan(after: pd.DataFrame, t: balance.Thresholds) -> str:
    """Per broker, max/mean disk usage before and after the plan."""
    plt = _matplotlib()
    online = after[after["online"]]
    # groupby's own max and mean, not a Python function per broker (1.2 s of a 5,000-broker report).
    by = online["load"].groupby([online["cluster"], online["broker"]])
    before = by.max() / by.mean()
    kept = online[~online["drained"]]
    by = kept["load_after"].groupby([kept["cluster"], kept["broker"]])
    later = by.max() / by.mean()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    top = float(np.nanmax([before.max(), later.max(), 1 + 2 * t.half_width]))
    bins = np.linspace(1.0, min(top, 3.0), 50)
    ax.hist(before.clip(upper=bins[-1]).dropna(), bins=bins, color="#4c78a8", alpha=0.75, label="before")
    ax.hist(later.clip(upper=bins[-1]).dropna(), bins=bins, color="#f58518", alpha=0.75, label="after the plan")
    ax.axvline(1 + t.half_width, color="#1b7f3b", linestyle="--", label="band's upper edge")
    ax.set_xlabel("max / mean disk usage per broker")
    ax.set_ylabel("brokers")
    ax.set_title("Brokers before and after the plan")
    ax.legend()
    return _svg(fig)


def plot_forecast(disk: Any, history: pd.DataFrame) -> str:
    """One flagged disk: its usage over the window, the projection from its last snapshot and the interval's band,
    against 90% and full."""
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(7, 2.6))
    total = float(disk.total_bytes)
    h = history.sort_values("hours")
    ax.plot(h["hours"], h["used_bytes"] / total * 100, color="#4c78a8", marker=".", markersize=3, label="used")
    start = -float(disk.as_of_hours)
    x = start + np.asarray(disk.projection_hours, dtype=float)
    if len(x):
        ax.fill_between(x, np.asarray(disk.projection_late, dtype=float) / total * 100,
                        np.asarray(disk.projection_early, dtype=float) / total * 100, color="#f58518", alpha=0.25,
                        linewidth=0, label="95% interval")
        ax.plot(x, np.asarray(disk.projection_bytes, dtype=float) / total * 100, color="#f58518", linestyle="--",
                label="projection")
    ax.grid(True, alpha=0.3)
    ax.axhline(90, color="#e45756", linestyle=":", linewidth=1)
    ax.axhline(100, color="#b00020", linewidth=1)
    ax.axvline(0, color="#999999", linewidth=0.8)
    ax.set_ylim(max(0.0, float(np.nanmin(h["used_bytes"] / total * 100)) - 5 if len(h) else 0.0), 105)
    ax.set_xlabel("hours from the latest snapshot")
    ax.set_ylabel("% of the disk")
    ninety, full = forecast_layout.say_hours(disk.hours_to_90), forecast_layout.say_hours(disk.hours_to_full)
    ax.set_title(f"{disk.cluster} broker {disk.broker} {disk.log_dir}: 90% in {ninety}, full in {full}", fontsize=9)
    ax.legend(loc="upper left", fontsize=7)
    return _svg(fig)


FORECAST_ROWS = 15  # disks per cluster in the forecast's table (forecast.parquet has all)


def forecast_section(disks: pd.DataFrame, history: pd.DataFrame) -> list[str]:
    """The forecast: per cluster, its disks by time to full; then each flagged disk's history and projection."""
    shown = disks[disks["status"] != forecast_layout.STATUS_OFFLINE].copy()
    for column in ("hours_to_90", "hours_to_full"):
        shown[column.replace("hours", "in")] = shown[column].map(forecast_layout.say_hours)
    shown["rate"] = shown["rate_bytes_per_hour"].map(lambda v: f"{format_bytes(max(0.0, v))}/h"
                                                    if pd.notna(v) else "unknown")
    shown["interval"] = [f"{format_bytes(max(0.0, lo))}-{format_bytes(max(0.0, hi))}/h" if pd.notna(lo) else ""
                         for lo, hi in zip(shown["rate_low"], shown["rate_high"], strict=True)]
    shown["driven by"] = shown["top_partitions"].map(lambda v: ", ".join(v))
    flagged = forecast_layout.flagged(disks)
    parts = ["<h2>Forecast: which disk fills next</h2>",
             f"<p>{len(forecast_layout.within(disks, 72)):,} disks full within 72 h; {len(flagged):,} at 90% within "
             "7 days (drawn below). Rates and times from the snapshots' history, partition by partition "
             "(docs/audit.md, forecast); the interval is 95%.</p>"]
    for cluster, rows in shown.groupby("cluster", sort=True):
        rows = rows.sort_values(["hours_to_full", "hours_to_90"], kind="mergesort", na_position="last")
        parts += [f"<h3>{html.escape(str(cluster))}</h3>",
                  _table(rows, {"broker": "broker", "log_dir": "log dir", "percent": "used %", "rate": "rate",
                                "interval": "95% interval", "in_to_90": "90% in", "in_to_full": "full in",
                                "driven by": "driven by", "status": "status"}, FORECAST_ROWS)]
    for i, disk in enumerate(flagged.itertuples()):
        mine = history[(history["cluster"] == disk.cluster) & (history["broker"] == disk.broker)
                       & (history["log_dir"] == disk.log_dir)] if len(history) else history
        parts.append(f"<div class='figure' id='forecast{i}'>{plot_forecast(disk, mine)}</div>")
    return parts


def render(audit_dir: Path, plan_dir: Path | None = None) -> str:
    findings = _read_json(audit_dir / "findings.json")
    disks = _read_parquet(audit_dir / "disks.parquet")
    brokers = _read_parquet(audit_dir / "brokers.parquet")
    clusters = _read_parquet(audit_dir / "clusters.parquet")
    t = balance.Thresholds(**findings["thresholds"])
    fleet = findings["fleet"]
    after = None
    plan_summary: dict[str, Any] | None = None
    if plan_dir is not None:
        plan_summary = _read_json(plan_dir / plan_layout.SUMMARY_FILE)
        after = _with_after(plan_layout.read_disks(plan_dir))

    def count(label: str, value: Any, bad: bool) -> str:
        shown = "not checked" if value is None else f"{value:,}"
        cls = "bad" if bad and value else "ok"
        return f"<tr><td>{html.escape(label)}</td><td class='{cls}'>{html.escape(shown)}</td></tr>"

    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>mover-audit: {html.escape(str(findings['snapshot']))}</title><style>{CSS}</style></head><body>",
        f"<h1>Disk balance of {fleet['clusters']} clusters, {fleet['brokers']:,} brokers, {fleet['disks']:,} "
        f"disks</h1><p class='note'>Snapshot {html.escape(str(findings['snapshot']))}. Band: each disk within the "
        f"broker's average x (1 &plusmn; {t.half_width:.3f}) (balance {t.balance}, margin {t.margin}); capacity "
        f"threshold {t.capacity:.0%}. Used {html.escape(format_bytes(fleet['used_bytes']))} of "
        f"{html.escape(format_bytes(fleet['total_bytes']))}.</p>",
        "<table>",
        count("brokers with a disk out of band", fleet["brokers_out_of_band"], True),
        count("disks out of band", fleet["disks_out_of_band"], True),
        count("disks over the capacity threshold", fleet["disks_over_capacity"], True),
        count("offline log dirs", fleet["disks_offline"], True),
        count("moves in progress", fleet["moves_in_progress"], False),
        count("stuck moves (no progress since the previous snapshot)", fleet["stuck_moves"], True),
        count("partitions in two dirs of one broker", fleet["duplicate_partitions"], True),
        count("brokers whose disk sizes are unknown", fleet["brokers_capacity_unknown"], True),
        "</table>",
        "<h2>Distribution of disk usage</h2>",
        f"<div class='figure' id='distribution'>{plot_distribution(disks, t)}</div>",
        f"<div class='figure' id='deviation'>{plot_deviation(disks, t, after)}</div>",
        "<h2>Spread per cluster</h2>",
        f"<div class='figure' id='clusters'>{plot_cluster_spread(brokers, t)}</div>",
        _table(clusters, {"cluster": "cluster", "brokers": "brokers", "brokers_out_of_band": "out of band",
                          "disks_over_capacity": "disks over cap.", "disks_offline": "offline dirs",
                          "max_mean_ratio_worst": "worst max/mean", "max_mean_ratio_median": "median max/mean"}),
        "<h2>Worst brokers</h2>",
        f"<div class='figure' id='worst'>{plot_worst(disks, brokers, after)}</div>",
        _table(brokers, {"cluster": "cluster", "broker": "broker", "disks": "disks", "max_mean_ratio": "max/mean",
                         "percent_std": "std of %", "disks_out_of_band": "out of band",
                         "disks_over_capacity": "over cap.", "disks_offline": "offline", "basis": "judged on"}),
    ]
    if plan_summary is not None:
        s = plan_summary
        ratio = s.get("moved_over_lower_bound")
        parts += [
            "<h2>The plan</h2>",
            f"<p>{s['moves']:,} moves, {html.escape(format_bytes(s['bytes_to_move']))} to move"
            + (f" ({ratio:.3f} x the lower bound)" if ratio else "")
            + f"; disks out of band {s['disks_out_of_band_before']:,} &rarr; {s['disks_out_of_band_after']:,}; "
            f"about {s['seconds_at_throttle'] / 3600:.1f} h at "
            f"{html.escape(format_bytes(s['throttle_bytes_per_second']))}/s per broker.</p>",
            f"<div class='figure' id='plan'>{plot_plan(after, t)}</div>",
        ]
    foreseen = forecast_layout.read(audit_dir)
    if foreseen is not None:
        parts += forecast_section(*foreseen)
    offline = findings.get("offline_dirs") or []
    stuck = findings.get("stuck_moves") or []
    if offline:
        parts += ["<h2>Offline log dirs</h2>", _table(pd.DataFrame(offline), {"cluster": "cluster",
                                                                              "broker": "broker",
                                                                              "log_dir": "log dir",
                                                                              "error": "error"}, 50)]
    if stuck:
        parts += ["<h2>Stuck moves</h2>", _table(pd.DataFrame(stuck), {
            "cluster": "cluster", "broker": "broker", "topic": "topic", "partition": "partition",
            "log_dir": "to dir", "size_bytes": "copied bytes", "since": "no progress since"}, 50)]
    parts.append("</body></html>\n")
    return "\n".join(parts)
