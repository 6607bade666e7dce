"""Fuzz the engine and the webhook's review handler with malformed shapes of real manifests; prints figures.

    .venv/bin/python bench/fuzz.py [--count 1000000] [--seed 1] [--jobs 2]
    .venv/bin/python bench/fuzz.py --replay 1234 [--seed 1]     (one object again: its JSON and tracebacks)

Each object is a real manifest (tests/fixtures/real) or a unit-test builder object with 1-4 malformed changes
(tests/fuzz/shapes.py: type swaps, missing keys, 1e400/nan/inf/-1/2**63, 300-level nesting, unicode, empty
containers, `containers: 5`, names None, odd node selection; one in 200 also has one list grown to up to
4,000 items). It is judged by the shipped policies or the shipped set plus gang injection (each scheduler of
examples/policies), with or without cluster facts, as a CREATE or as an UPDATE of another shape of the same
manifest, with mutation; a non-empty patch must apply with jsonpatch and mutating its result must patch
nothing. Every tenth object also goes through the webhook's `parse_review` + `admit`, on /mutate and
/validate. An evaluation over 50 ms, or the slowest so far of its size, is timed twice more and counted by its
best time.

Printed: uncaught exceptions (an exception out of evaluate, or out of parse_review/admit, or an engine
failure the webhook had to answer for), engine-level errors (a rule's `error` whose note is an exception's
`Type: message`, or mutations that never settled), every rule `error` outcome by rule and note, patch
problems, and the slowest single evaluation with its size. Targets: 0 uncaught exceptions, 0 engine-level
errors, no single evaluation over 50 ms below 3 MiB. Each category names its first object (`--replay N`).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import random
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]  # tests/ first: `fuzz` is tests/fuzz, not this script

import orjson  # noqa: E402
from fuzz.shapes import (  # noqa: E402
    SCHEDULERS,
    Failures,
    cluster_facts,
    engine_level_errors,
    gang_policies,
    mutated,
    patch_problems,
    seed_objects,
    shipped_policies,
)

from mlgate.engine import evaluate  # noqa: E402
from mlgate.model.facts import NO_FACTS  # noqa: E402
from mlgate.model.results import Outcome  # noqa: E402
from mlgate_webhook.review import ReviewError, admit, make_review, parse_review  # noqa: E402

SLOW_MS = 50.0
MAX_BYTES = 3 * 1024 * 1024
GROW = 0.005  # share of objects with one list grown to up to thousands of items (they take most of the time)
WEBHOOK_EVERY = 10
CHUNK = 250


@dataclass
class Tally:
    """Counts from one or more chunks; each key keeps the first object index that showed it."""

    objects: int = 0
    evaluations: int = 0
    webhook_reviews: int = 0
    uncaught: Counter[str] = field(default_factory=Counter)
    engine_errors: Counter[str] = field(default_factory=Counter)
    rule_errors: Counter[str] = field(default_factory=Counter)
    patch: Counter[str] = field(default_factory=Counter)
    slow: Counter[str] = field(default_factory=Counter)  # over SLOW_MS and under MAX_BYTES, by size
    first: dict[str, int] = field(default_factory=dict)
    slowest: tuple[float, int, int] = (0.0, 0, -1)  # (ms, bytes, object index)
    # per size bucket: the slowest (ms, bytes, object index, what was done to it)
    slowest_by_size: dict[str, tuple[float, int, int, str]] = field(default_factory=dict)

    def add(self, counter: Counter[str], key: str, index: int) -> None:
        counter[key] += 1
        self.first[key] = min(self.first.get(key, index), index)

    def merge(self, other: Tally) -> None:
        self.objects += other.objects
        self.evaluations += other.evaluations
        self.webhook_reviews += other.webhook_reviews
        for name in ("uncaught", "engine_errors", "rule_errors", "patch", "slow"):
            getattr(self, name).update(getattr(other, name))
        for key, index in other.first.items():
            self.first[key] = min(self.first.get(key, index), index)
        self.slowest = max(self.slowest, other.slowest)
        for bucket, entry in other.slowest_by_size.items():
            self.slowest_by_size[bucket] = max(self.slowest_by_size.get(bucket, entry), entry)


SIZE_BUCKETS = ((64 * 1024, "under 64 KiB"), (512 * 1024, "64-512 KiB"), (MAX_BYTES, "512 KiB-3 MiB"))


def bucket_of(size: int) -> str:
    return next((name for limit, name in SIZE_BUCKETS if 0 <= size < limit), "3 MiB or more")


def size_of(obj: Any) -> int:
    try:
        return len(json.dumps(obj, default=str))
    except (RecursionError, ValueError):
        return -1


def where(exc: BaseException) -> str:
    """`Type: message @ file:line` of the innermost frame in mlgate or the webhook."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/mlgate/" in f.filename
              or "/webhook/" in f.filename]
    frame = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {str(exc)[:100]} @ {Path(frame.filename).relative_to(REPO)}:{frame.lineno}" \
        if frame.filename.startswith(str(REPO)) else f"{type(exc).__name__}: {str(exc)[:100]} @ {frame.filename}"


def case(seed: int, index: int) -> dict[str, Any]:
    """Object `index` of run `seed`: the same on every machine and in every process."""
    rng = random.Random(seed * 10_000_019 + index)
    name, origin = rng.choice(seed_objects())
    obj, changes = mutated(origin, rng, grow=GROW)
    scheduler = rng.choice(SCHEDULERS)
    policies = shipped_policies() if rng.random() < 0.5 else gang_policies(scheduler)
    facts = NO_FACTS if rng.random() < 0.5 else cluster_facts(scheduler)
    roll = rng.random()
    old = None if roll < 0.5 else origin if roll < 0.75 else mutated(origin, rng)[0]
    return {"name": name, "changes": changes, "obj": obj, "old": old, "policies": policies, "facts": facts,
            "scheduler": scheduler, "webhook": index % WEBHOOK_EVERY == 0}


CAUGHT = Failures()  # what the engine and the webhook caught and logged, for where it was raised


def raised_where(rule: str, note: str) -> str:
    """Where the exception behind a rule's engine-level error was raised, from the engine's log."""
    found = [e for e, said in zip(CAUGHT.caught, CAUGHT.messages, strict=True)
             if said.endswith(f"/{rule} failed") and f"{type(e).__name__}: {e}" == note]
    return f" @ {where(found[0]).split(' @ ', 1)[1]}" if found else ""


def timed(obj: dict[str, Any], old: dict[str, Any] | None, operation: str, policies: Any,
          facts: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    decision = evaluate(obj, policies, facts=facts, operation=operation, old_obj=old)  # type: ignore[arg-type]
    return decision, (time.perf_counter() - started) * 1000


def run_one(seed: int, index: int, tally: Tally) -> None:
    c = case(seed, index)
    obj, old, policies, facts = c["obj"], c["old"], c["policies"], c["facts"]
    operation = "UPDATE" if old is not None else "CREATE"
    tally.objects += 1
    CAUGHT.caught.clear()
    CAUGHT.messages.clear()
    try:
        decision, took = timed(obj, old, operation, policies, facts)
        tally.evaluations += 1
        if took > 5:  # the size only where the time may matter: serialising every object costs more
            size = size_of(obj)
            bucket = bucket_of(size)
            if took > SLOW_MS or took > tally.slowest_by_size.get(bucket, (0.0,))[0]:
                # a figure that counts is the best of three: a pause of the machine is not the engine's time
                took = min(took, *(timed(obj, old, operation, policies, facts)[1] for _ in range(2)))
            tally.slowest = max(tally.slowest, (took, size, index))
            entry = (took, size, index, f"{c['name']} {c['changes']}"[:160])
            tally.slowest_by_size[bucket] = max(tally.slowest_by_size.get(bucket, entry), entry)
            if took > SLOW_MS and 0 <= size < MAX_BYTES:
                tally.add(tally.slow, f"{bucket}: over {SLOW_MS:.0f} ms", index)
        for result in decision.results:
            if result.outcome is Outcome.ERROR:
                tally.add(tally.rule_errors, f"{result.rule}: {result.note[:140]}", index)
        for result in engine_level_errors(decision):
            at = raised_where(result.rule, result.note)
            tally.add(tally.engine_errors, f"{result.rule}: {result.note[:140]}{at}", index)
        if decision.patch:
            for problem in patch_problems(obj, decision, policies, facts, operation, old):
                tally.add(tally.patch, problem.split(":")[0], index)
    except Exception as exc:  # counting them is the point
        tally.add(tally.uncaught, f"evaluate: {where(exc)}", index)
    if c["webhook"]:
        webhook(c, operation, index, tally)


def webhook(c: dict[str, Any], operation: str, index: int, tally: Tally) -> None:
    """The review as the API server sends it (JSON cannot hold NaN or inf: json.dumps writes them, and
    parse_review must refuse them with a 400), through both endpoints, and the answer back to JSON."""
    obj, old, policies, facts = c["obj"], c["old"], c["policies"], c["facts"]
    tally.webhook_reviews += 1
    try:
        body = json.dumps(make_review(obj, operation, old=old)).encode()
    except (ValueError, RecursionError):
        return
    try:
        request = parse_review(body, "application/json")
    except ReviewError:
        return
    except Exception as exc:
        tally.add(tally.uncaught, f"parse_review: {where(exc)}", index)
        return
    for endpoint in ("mutate", "validate"):
        CAUGHT.caught.clear()
        CAUGHT.messages.clear()
        try:
            admission = admit(request, policies, facts, endpoint)  # type: ignore[arg-type]
            orjson.dumps(admission.review())
        except Exception as exc:
            tally.add(tally.uncaught, f"admit /{endpoint}: {where(exc)}", index)
            continue
        if admission.verdict == "error":  # evaluate raised; the webhook answered with its failure policy
            cause = where(CAUGHT.caught[-1]) if CAUGHT.caught else admission.messages[0][:120]
            tally.add(tally.uncaught, f"admit /{endpoint}: engine failure: {cause}", index)


def run_chunk(job: tuple[int, int, int]) -> Tally:
    seed, start, stop = job
    quiet()
    tally = Tally()
    for index in range(start, stop):
        run_one(seed, index, tally)
    return tally


def quiet() -> None:
    """The engine logs each rule that raised, with its traceback: kept in CAUGHT, not printed."""
    logger = logging.getLogger("mlgate")
    logger.propagate = False
    logger.setLevel(logging.ERROR)
    if CAUGHT not in logger.handlers:
        logger.addHandler(CAUGHT)


def replay(seed: int, index: int) -> None:
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(message)s")
    c = case(seed, index)
    print(f"object {index} of seed {seed}: {c['name']} with {c['changes']}")
    print("policies:", "shipped" if c["policies"] is shipped_policies() else f"shipped + gang-{c['scheduler']}",
          "| facts:", "none" if c["facts"] is NO_FACTS else "cluster", "| UPDATE" if c["old"] is not None else "")
    print(json.dumps(c["obj"], default=str)[:4000])
    tally = Tally()
    logging.getLogger("mlgate").addHandler(CAUGHT)
    try:
        run_one(seed, index, tally)
    except Exception:
        traceback.print_exc()
    report(tally, 0.0)


def report(tally: Tally, seconds: float) -> bool:
    def section(title: str, counter: Counter[str]) -> None:
        print(f"\n{title}: {sum(counter.values())}")
        for key, count in counter.most_common():
            print(f"  {count:8d}  {key}   [first: object {tally.first[key]}]")

    rate = tally.objects / seconds if seconds else 0.0
    print(f"\n{tally.objects} objects, {tally.evaluations} evaluations, {tally.webhook_reviews} webhook reviews"
          + (f" in {seconds:.0f} s ({rate:.0f} objects/s)" if seconds else ""))
    section("uncaught exceptions", tally.uncaught)
    section("engine-level errors (a rule raised, or mutations did not settle)", tally.engine_errors)
    section("rule error outcomes, by rule and note", tally.rule_errors)
    section("patch problems", tally.patch)
    ms, size, index = tally.slowest
    print(f"\nslowest single evaluation: {ms:.1f} ms on {size} bytes [object {index}]")
    for _, bucket in (*SIZE_BUCKETS, (0, "3 MiB or more")):
        if bucket in tally.slowest_by_size:
            took, size_b, index_b, what = tally.slowest_by_size[bucket]
            print(f"  slowest {bucket:>13}: {took:7.1f} ms on {size_b:8d} bytes [object {index_b}] {what}")
    section(f"evaluations over {SLOW_MS:.0f} ms below 3 MiB", tally.slow)
    uncaught, engine, slow = sum(tally.uncaught.values()), sum(tally.engine_errors.values()), sum(tally.slow.values())
    ok = not (uncaught or engine or slow)
    print(f"\nSUMMARY: {'PASS' if ok else 'FAIL'}: uncaught exceptions {uncaught} (target 0), engine-level errors "
          f"{engine} (target 0), evaluations over {SLOW_MS:.0f} ms below 3 MiB {slow} (target 0); "
          f"slowest {ms:.1f} ms on {size} bytes")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10**6, help="objects to judge (default 1,000,000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--replay", type=int, metavar="INDEX", help="judge one object again, with tracebacks")
    args = parser.parse_args()
    if args.replay is not None:
        replay(args.seed, args.replay)
        return
    seed_objects(), shipped_policies()  # loaded once, before the fork
    for scheduler in SCHEDULERS:
        gang_policies(scheduler), cluster_facts(scheduler)
    jobs = [(args.seed, start, min(start + CHUNK, args.count)) for start in range(0, args.count, CHUNK)]
    print(f"fuzzing {args.count} objects from {len(seed_objects())} seed manifests, seed {args.seed}, "
          f"{args.jobs} processes", flush=True)
    total, started, shown = Tally(), time.perf_counter(), 0.0
    context = multiprocessing.get_context("fork")
    with context.Pool(args.jobs) as pool:
        for part in pool.imap_unordered(run_chunk, jobs):
            total.merge(part)
            now = time.perf_counter() - started
            if now - shown >= 10 or total.objects == args.count:
                shown = now
                print(f"  {total.objects:9d}/{args.count}  {now:6.0f} s  uncaught {sum(total.uncaught.values())}"
                      f"  engine-level {sum(total.engine_errors.values())}  rule errors "
                      f"{sum(total.rule_errors.values())}  slowest {total.slowest[0]:.1f} ms", flush=True)
    ok = report(total, time.perf_counter() - started)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
