"""Screenshots of the web UI for the README (docs/screenshots/*.png); run by hand, not a test.

The same real captures as test_ui.py (PostgreSQL before and after an index drop, Redis), laid
out as an hour of history: copies of each capture moved in time with `editcap -t`, one per
minute, `before` in the first half hour and `after` in the second (so the Query page shows the
step in latency and Compare compares the two halves). The packets are the real ones; only their
timestamps are moved. The Live screenshot comes from test_ui.py's run (tests/out/ui/live.png).

Run: `DBTAP_BIN=target/release/dbtap /usr/bin/python3 tests/integration/screenshots.py`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
import pg_harness as ph  # noqa: E402
import redis_harness as rh  # noqa: E402
import test_diff as td  # noqa: E402
import test_ui as tu  # noqa: E402
from ui_harness import Browser, Ui  # noqa: E402

OUT = tu.OUT / "shots"
DOCS = harness.REPO / "docs" / "screenshots"
MINUTES = 60


def captures() -> dict[str, Path]:
    OUT.mkdir(parents=True, exist_ok=True)
    pg = ph.PgServer(tu.PG_PORT, tu.OUT / "pg")
    redis = rh.RedisServer(tu.REDIS_PORT, tu.OUT / "redis")
    try:
        pg.start()
        td.load_schema(pg)
        redis.start()
        before, _ = tu.pg_capture(pg, "before", seed=1)
        with ph.closing(pg.admin_conn(ph.DB)) as c, c.cursor() as cur:
            cur.execute("DROP INDEX t_k")
        after, _ = tu.pg_capture(pg, "after", seed=2)
        red, _ = tu.redis_capture(redis)
    finally:
        redis.stop()
        pg.stop()
    return {"before": before, "after": after, "redis": red}


def moved(src: Path, to_s: int, name: str) -> Path:
    """A copy of `src` whose first packet is at unix second `to_s`."""
    shift = to_s - td.first_packet_ns(src) // 1_000_000_000
    out = OUT / name
    tmp = tu.shifted(src, shift)
    shutil.move(tmp, out)
    return out


def main() -> None:
    caps = captures()
    end = td.first_packet_ns(caps["after"]) // 1_000_000_000
    files = []
    for k in range(MINUTES):
        t = end - (MINUTES - 1 - k) * 60
        files.append(moved(caps["before" if k < MINUTES // 2 else "after"], t, f"pg-{k:02d}.pcap"))
        if k % 2 == 0:
            files.append(moved(caps["redis"], t + 20, f"redis-{k:02d}.pcap"))
    DOCS.mkdir(parents=True, exist_ok=True)
    with Ui(tu.UI_PORT, *files, *tu.PORTS) as ui, Browser(width=1360, height=860) as b:
        m = ui.api("meta")
        frm, to = m["span"]["from"], m["span"]["to"]
        page = b.open(f"{ui.base}/?from={frm}&to={to}")
        b.page.screenshot(path=str(DOCS / "top.png"))
        page = b.act(lambda: page.click("#top-table tbody tr[data-id] td.fp a"))
        b.page.wait_for_timeout(300)
        b.page.screenshot(path=str(DOCS / "query.png"), full_page=True)
        mid = frm + (to - frm) // 2
        b.open(f"{ui.base}/compare?a_from={frm}&a_to={mid}&b_from={mid}&b_to={to}")
        b.page.screenshot(path=str(DOCS / "compare.png"))
    live = tu.OUT / "live.png"
    if live.exists():
        shutil.copy(live, DOCS / "live.png")
    for p in sorted(DOCS.glob("*.png")):
        print(p, p.stat().st_size)


if __name__ == "__main__":
    main()
