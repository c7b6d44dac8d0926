"""The runs page under load, in a real headless Chromium; and the README's screenshots.

``python -m benchmarks.ui_page measure``: a run with 10,000 committed versions; the run
page's first load (time to the first paint of the timeline, bytes received per request) and
its live updates while 1,000 more versions are applied (delay from commit to the version
shown in the page, bytes per version on the event stream).

``python -m benchmarks.ui_page screenshots DIR``: the runs list and a run page during a
parallel handoff (eight slow skill calls, at most four in flight), as PNG files.

Bytes are what Chrome's network log says each response really carried (encoded length).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from pydantic import BaseModel

from actors import Call, Orchestrator, Run, SkillRegistry, ask_approval, parallel_handoff
from cluster import connect
from cluster.cli.ui import RunSource, UiServer, headless_chromium
from coordinators import AgentState, ContextSnapshot, CoordinatorResult, TransitionBatch

VERSIONS = 10_000
LIVE_VERSIONS = 1_000


# ----------------------------------------------------------------------------- helpers


def _wait(driver: Any, script: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError(f"the page never satisfied: {script}")


_urls: dict[str, str] = {}  # request id -> URL, kept across calls (a stream outlives one call)


def _network_bytes(driver: Any) -> dict[str, int]:
    """Bytes received per URL path since the last call, from Chrome's network log."""
    urls = _urls
    received: dict[str, int] = {}
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message["method"] == "Network.responseReceived":
            urls[params["requestId"]] = params["response"]["url"]
        elif message["method"] == "Network.dataReceived":
            received[params["requestId"]] = received.get(params["requestId"], 0) + int(params.get("encodedDataLength") or 0)
        elif message["method"] == "Network.loadingFinished":
            received[params["requestId"]] = max(received.get(params["requestId"], 0), int(params.get("encodedDataLength") or 0))
    out: dict[str, int] = {}
    for request_id, size in received.items():
        url = urls.get(request_id, "?")
        path = url.split("://", 1)[-1].split("/", 1)[-1].split("?", 1)[0]
        out["/" + path] = out.get("/" + path, 0) + size
    return out


# ----------------------------------------------------------------------------- measure


async def _build_run(name: str, versions: int) -> Orchestrator[Any]:
    orch = Orchestrator(AgentState(), name=name, keep_versions=versions + LIVE_VERSIONS + 10)
    started = time.perf_counter()
    for i in range(1, versions + 1):
        batch = TransitionBatch().update_state("step", i)
        if i % 10 == 0:
            batch.add_message({"role": "assistant", "content": f"step {i}: looked at file_{i % 97}.py and found {i % 7} matches"})
        await orch.apply_batch(batch)
    print(f"built {versions:,} versions in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return orch


async def measure(repeats: int) -> dict[str, Any]:
    connect(code_from_cwd=False)
    orch = await _build_run("ui-load-10k", VERSIONS)
    results: dict[str, Any] = {"versions": VERSIONS}
    try:
        with UiServer(RunSource(), port=0).start() as server, headless_chromium(network_log=True) as driver:
            loads = []
            for _ in range(repeats):
                driver.get("about:blank")
                driver.get_log("performance")
                driver.get(server.run_url(orch.name))
                painted = _wait(driver, "return window.soloistTimings && window.soloistTimings.timeline")
                fcp = driver.execute_script(
                    "const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : null")
                time.sleep(0.5)
                loads.append({"timeline_painted_ms": round(painted, 1), "first_contentful_paint_ms": fcp and round(fcp, 1),
                              "bytes": _network_bytes(driver),
                              "timeline_entries": driver.execute_script("return document.querySelectorAll('#timeline li').length")})
            results["first_load"] = loads
            results["first_load_timeline_painted_ms_median"] = statistics.median(x["timeline_painted_ms"] for x in loads)
            results["first_load_bytes_total"] = sum(loads[-1]["bytes"].values())

            # live: LIVE_VERSIONS more versions at full speed, then a slow trickle (one every 50 ms)
            _wait(driver, "return document.getElementById('live-note').textContent === 'live'")
            driver.get_log("performance")
            committed: dict[int, float] = {}
            for i in range(LIVE_VERSIONS):
                version = await orch.apply_batch(TransitionBatch().update_state("live", i))
                committed[version] = time.time() * 1000
            burst_end = max(committed)
            trickle: dict[int, float] = {}
            for i in range(50):
                version = await orch.apply_batch(TransitionBatch().update_state("trickle", i))
                trickle[version] = time.time() * 1000
                await asyncio.sleep(0.05)
            last = max(trickle)
            await asyncio.to_thread(_wait, driver, f"return document.getElementById('version').textContent === '{last}'")
            await asyncio.sleep(1.5)
            seen = dict(driver.execute_script("return window.soloistTimings.versions"))
            live_bytes = _network_bytes(driver)
            shown = [seen[v] - t for v, t in trickle.items() if v in seen]
            burst_shown = [v for v in committed if v in seen]
            results["live"] = {
                "burst_versions": LIVE_VERSIONS,
                "burst_seconds_commit": round((committed[burst_end] - min(committed.values())) / 1000, 2),
                "burst_last_version_shown_after_ms": round(seen.get(burst_end, float("nan")) - committed[burst_end], 1),
                "burst_page_updates": len(burst_shown),
                "trickle_versions": len(trickle),
                "trickle_delay_ms_median": round(statistics.median(shown), 1) if shown else None,
                "trickle_delay_ms_max": round(max(shown), 1) if shown else None,
                "bytes": live_bytes,
                "event_stream_bytes_per_version": round(live_bytes.get("/api/events", 0) / (LIVE_VERSIONS + len(trickle)), 1),
            }
    finally:
        await orch.close()
    return results


# ----------------------------------------------------------------------------- screenshots


class SlowIn(BaseModel):
    path: str
    seconds: float = 10.0


class SlowOut(BaseModel):
    lines: int


def _skills() -> SkillRegistry:
    skills = SkillRegistry()

    @skills.skill("read_file")
    def read_file(inp: SlowIn) -> SlowOut:
        time.sleep(inp.seconds)
        return SlowOut(lines=len(inp.path) * 7)

    return skills


def _trail(snapshot: ContextSnapshot, who: str, why: str, confidence: float) -> list[dict[str, Any]]:
    trail = list(snapshot.get_state("trail", []) or [])
    return trail + [{"coordinator": who, "reasoning": why, "confidence": confidence}]


class Planner:
    name = "planner"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        batch = TransitionBatch().update_stage("reading")
        files = [f"src/billing/{n}.py" for n in ("ledger", "invoice", "tax", "refund", "export", "audit", "api", "models")]
        batch.update_state("plan", files)
        for i, path in enumerate(files):
            batch.execute_tool("read_file", {"path": path}, call_id=f"read-{i}")
        why = f"the task names billing; read its {len(files)} modules in parallel"
        batch.update_state("trail", _trail(snapshot, self.name, why, 0.86))
        return CoordinatorResult(transitions=batch, reasoning=why, confidence=0.86, handoff_to="reviewer")


class Reviewer:
    name = "reviewer"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        why = "every module read; the refund path writes to the ledger: ask before changing it"
        batch = TransitionBatch().update_stage("review").update_state("trail", _trail(snapshot, self.name, why, 0.64))
        batch.execute_tool("read_file", {"path": "src/billing/refund.py", "seconds": 0.1}, call_id="patch-refund")
        result = CoordinatorResult(transitions=batch, reasoning=why, confidence=0.64, handoff_to="reviewer",
                                   should_continue=True)
        return ask_approval(result, {"action": "patch src/billing/refund.py", "why": "writes to the ledger <b>twice</b>"},
                            call_ids=["patch-refund"])


async def screenshots(out_dir: str) -> list[str]:
    connect(code_from_cwd=False)
    os.makedirs(out_dir, exist_ok=True)
    out_dir = os.path.abspath(out_dir)
    os.chdir(tempfile.mkdtemp())  # the page shows the store as given: a plain relative name
    store = "runs.sqlite"
    done = Orchestrator(AgentState(), name="nightly-audit", store=store)
    for i in range(41):
        await done.apply_batch(TransitionBatch().update_state("step", i).update_stage("complete" if i == 40 else "reading"))
    await done.close()
    other = Orchestrator(AgentState(), name="triage-2026-12-03", store=store, caller=_skills())
    await other.apply_batch(TransitionBatch().update_stage("exploring"))
    orch = Orchestrator(AgentState(), name="billing-refactor", store=store, caller=_skills())
    run = Run(orch, [Planner(), Reviewer()], first="planner", fallback="reviewer", max_turns=6)
    paths = []
    try:
        with UiServer(RunSource(store=store), port=0, allow_actions=True).start() as server, \
                headless_chromium(width=1400, height=1200) as driver:
            background = asyncio.create_task(
                parallel_handoff(other, [Call("read_file", {"path": "x.py", "seconds": 30.0})], SlowOut))
            task = asyncio.create_task(run.run("where does billing write refunds?"))
            driver.get(server.run_url(orch.name) + "#token=" + (server.token or ""))
            await asyncio.to_thread(_wait, driver, "return document.querySelector('main[data-ready]')")
            # wait for four handoffs in flight on the chart's data, and a few seconds of samples
            await asyncio.to_thread(_wait, driver, "return document.querySelectorAll('#timeline li').length >= 2", 60)
            await asyncio.sleep(14)
            driver.execute_script("document.querySelectorAll('#state details').forEach(d => { if (d.getAttribute('data-path') === '' || d.getAttribute('data-path') === '/conversation_state') d.open = true; })")
            path = os.path.join(out_dir, "ui-run-page.png")
            driver.save_screenshot(path)
            paths.append(path)
            driver.get(server.url)
            await asyncio.to_thread(_wait, driver, "return document.querySelectorAll('#runs-body tr').length >= 3")
            await asyncio.sleep(0.5)
            path = os.path.join(out_dir, "ui-runs-list.png")
            driver.save_screenshot(path)
            paths.append(path)
            outcome = await task
            print("run:", outcome.status, file=sys.stderr)
            background.cancel()
            await asyncio.gather(background, return_exceptions=True)
    finally:
        await orch.close()
        await other.close()
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ui_page", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--repeats", type=int, default=3)
    s = sub.add_parser("screenshots")
    s.add_argument("out_dir")
    args = parser.parse_args(argv)
    if args.what == "measure":
        print(json.dumps(asyncio.run(measure(args.repeats)), indent=2))
    else:
        print("\n".join(asyncio.run(screenshots(args.out_dir))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
