"""The discrete-event simulation of one long training job under failures.

The job alternates between running and recovering. While running it computes, and every
``interval`` seconds of wall time it checkpoints: with a blocking checkpoint the last
``checkpoint_cost`` seconds of each interval are the save (no training), with an async
one only ``async_block`` seconds block and the copy finishes ``checkpoint_cost`` seconds
after the save started, while training goes on. So without failures ETTR is exactly
1 - blocking / interval. Failures arrive per node (a Poisson process whose rate is the
sum of the job's nodes' rates, so excluding a bad node lowers it). A failure costs the
work since the last *durable* checkpoint, the detection time of its kind under the
policy's detectors, and the restart: in place (``restart_cost``) or on a new allocation
(``reschedule_cost`` more, and a wait when no spare node is free). A node that failed
persistently (a dead GPU, a lost host) fails again at once if the job restarts on it;
it is out of service for ``repair_time`` and then returns to the spare pool.

Time is simulated, never waited for; every random draw comes from one seeded generator.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from workflows.simulate.failures import Detection, FailureKind, FailureModel, TracedFailure
from workflows.simulate.policies import Action, Failure, Policy


@dataclass(frozen=True)
class Mechanics:
    """What a failure costs, in seconds (defaults: a large job on a busy cluster)."""

    checkpoint_interval_s: float
    checkpoint_cost_s: float = 60.0  # blocking save (or the whole copy when async)
    async_block_s: float | None = None  # async checkpoint: only this much blocks
    restart_cost_s: float = 300.0  # detection -> first new step, in place
    reschedule_cost_s: float = 120.0  # extra for a new allocation / pod (scheduling)
    crash_detect_s: float = 10.0
    node_detect_s: float = 60.0
    hang_timeout_s: float = 120.0  # resched / NVRx hang detection
    watchdog_s: float = 600.0  # NCCL's collective timeout (PyTorch default 10 min)
    repair_time_s: float = 4 * 3600.0
    spare_nodes: int | None = None  # None: 1% of the job's nodes, at least 2
    resubmit_after_s: float | None = None  # a human resubmits a failed job after this

    @property
    def blocking_s(self) -> float:
        return self.async_block_s if self.async_block_s is not None else self.checkpoint_cost_s

    def detection_s(self, kind: FailureKind, hang_detection: str) -> float:
        if kind.detection is Detection.HANG:
            return self.hang_timeout_s if hang_detection == "resched" else self.watchdog_s
        if kind.detection is Detection.NODE:
            return self.node_detect_s
        return self.crash_detect_s


@dataclass
class Lost:
    detection: float = 0.0
    restart: float = 0.0
    reschedule_wait: float = 0.0
    lost_work: float = 0.0
    checkpoint: float = 0.0
    failed_idle: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.__dict__.items()}


@dataclass
class Outcome:
    wall_s: float
    useful_s: float
    interruptions: int
    lost: Lost
    failed: bool
    manual_interventions: int
    excluded_nodes: int
    by_kind: dict[str, int] = field(default_factory=dict)
    max_failures_between_checkpoints: int = 0

    @property
    def ettr(self) -> float:
        return self.useful_s / self.wall_s if self.wall_s > 0 else 0.0


class _Cluster:
    """The job's node slots, the spare pool, and nodes under repair.

    A node is (id, bad). Bad nodes fail ``bad_factor`` times as often; they are kept in a
    set of slot indices so that drawing the failing node costs O(1) at 100K GPUs."""

    def __init__(self, nodes: int, spares: int, model: FailureModel, seed: int,
                 repair_s: float) -> None:
        # separate streams: which nodes are bad, and which node a failure hits
        self.nodes_rng, self.rng = random.Random(f"{seed}/nodes"), random.Random(f"{seed}/hits")
        self.model, self.repair_s = model, repair_s
        self.next_id = 0
        self.slots = [self._new_node() for _ in range(nodes)]
        self.bad = {i for i, (_, bad) in enumerate(self.slots) if bad}
        self.spares = [self._new_node() for _ in range(spares)]
        self.repairs: list[tuple[float, tuple[int, bool]]] = []  # (back in service at, node)
        self.broken: set[int] = set()  # ids of nodes with an unrepaired persistent fault

    def _new_node(self) -> tuple[int, bool]:
        self.next_id += 1
        return (self.next_id, self.nodes_rng.random() < self.model.bad_fraction)

    def weight(self) -> float:
        return (len(self.slots) - len(self.bad)) + len(self.bad) * self.model.bad_factor

    def pick_slot(self) -> int:
        bad_weight = len(self.bad) * self.model.bad_factor
        if self.bad and self.rng.random() * self.weight() < bad_weight:
            return self.rng.choice(sorted(self.bad))
        if len(self.bad) == len(self.slots):
            return self.rng.randrange(len(self.slots))
        while True:  # rejection: bad slots are a small minority
            slot = self.rng.randrange(len(self.slots))
            if slot not in self.bad:
                return slot

    def replace(self, slot: int, now: float, *, excluded: bool) -> float:
        """Move the job off the node in ``slot``; return how long it waits for a spare.

        A broken node goes to repair and comes back as a spare; an excluded one (the
        policy asked never to use it again) leaves the job's pool for good."""
        node = self.slots[slot]
        if not excluded:
            self.repairs.append((now + (self.repair_s if node[0] in self.broken else 0.0), node))
        self._return_repaired(now)
        wait = 0.0
        if not self.spares:
            self.repairs.sort()
            if self.repairs:
                back_at, back = self.repairs.pop(0)
                wait = max(0.0, back_at - now)
                self.broken.discard(back[0])
                self.spares.append(back)
            else:
                self.spares.append(self._new_node())
        fresh = self.spares.pop(0)
        self.slots[slot] = fresh
        self.bad.discard(slot)
        if fresh[1]:
            self.bad.add(slot)
        return wait

    def _return_repaired(self, now: float) -> None:
        keep = []
        for back_at, node in self.repairs:
            if back_at <= now:
                self.broken.discard(node[0])
                self.spares.append(node)
            else:
                keep.append((back_at, node))
        self.repairs = keep


def simulate(policy: Policy, mechanics: Mechanics, model: FailureModel, *, gpus: int,
             gpus_per_node: int, duration_s: float, seed: int,
             trace: Sequence[TracedFailure] | None = None) -> Outcome:
    # Common random numbers: each source of chance has its own stream, so two policies
    # run with one seed see the same failure times and kinds for as long as their
    # clusters agree, and a comparison measures the policies, not the dice.
    rng, kinds_rng = random.Random(f"{seed}/gaps"), random.Random(f"{seed}/kinds")
    nodes = max(1, math.ceil(gpus / gpus_per_node))
    spares = mechanics.spare_nodes if mechanics.spare_nodes is not None else max(2, nodes // 100)
    cluster = _Cluster(nodes, spares, model, seed, mechanics.repair_time_s)
    node_rate = model.rate_per_gpu_s * gpus_per_node * _normaliser(model)
    tau, block = mechanics.checkpoint_interval_s, mechanics.blocking_s
    if not (tau > block >= 0) or mechanics.checkpoint_cost_s < block:
        raise ValueError("need interval > blocking checkpoint time, and the copy >= the block")
    pending = list(trace or ())
    now, useful, durable = 0.0, 0.0, 0
    lost, by_kind = Lost(), {}
    interruptions = manual = excluded = 0
    failures_since_progress = max_between = 0
    refail: tuple[FailureKind, int] | None = None  # a restart onto a broken node
    failed = False
    # Failures arrive in wall time, restarts included: the next one is drawn from the
    # moment of the previous failure, so one that falls inside a recovery hits the job
    # as soon as it runs again (a node dies while the job restarts).
    next_failure_t = 0.0 if trace is not None else _gap(node_rate * cluster.weight(), rng)
    while now < duration_s:
        # -- running: until the next failure, or the end of the simulated time ----------
        if refail is not None:
            kind, slot = refail
            run_for = 0.0
        elif trace is not None:
            if not pending:
                run_for = math.inf
            else:
                nxt = pending.pop(0)
                run_for = max(0.0, nxt.t_s - now)
                kind = nxt.kind
                slot = nxt.node % len(cluster.slots) if nxt.node is not None else cluster.pick_slot()
        else:
            run_for = max(0.0, next_failure_t - now)
            kind, slot = model.kind_for(kinds_rng), cluster.pick_slot()
        segment = min(run_for, duration_s - now)
        done, saved, last_durable_work = _run(segment, tau, block, mechanics.checkpoint_cost_s)
        useful += done
        lost.checkpoint += segment - done
        now += segment
        if saved:
            durable += saved
            failures_since_progress = 0
        if now >= duration_s:
            break
        # -- a failure -----------------------------------------------------------------------
        interruptions += 1
        by_kind[kind.name] = by_kind.get(kind.name, 0) + 1
        failures_since_progress += 1
        max_between = max(max_between, failures_since_progress)
        wasted = done - last_durable_work
        useful -= wasted
        lost.lost_work += wasted
        node_id, _ = cluster.slots[slot]
        if kind.persistent:
            cluster.broken.add(node_id)
        detect = mechanics.detection_s(kind, policy.hang_detection)
        verdict = policy.decide(Failure(kind, f"node-{node_id}", durable))
        recovery, wait = detect + mechanics.restart_cost_s, 0.0
        lost.detection += detect
        lost.restart += mechanics.restart_cost_s
        refail = None
        if verdict.action is Action.FAIL:
            failed = True
            if mechanics.resubmit_after_s is None:
                lost.failed_idle += max(0.0, duration_s - now - detect)
                now = duration_s
                break
            manual += 1
            policy.reset()
            lost.failed_idle += mechanics.resubmit_after_s
            recovery += mechanics.resubmit_after_s
            verdict_action = Action.RESCHEDULE
        else:
            verdict_action = verdict.action
        if verdict_action is Action.RESCHEDULE:
            recovery += mechanics.reschedule_cost_s
            lost.reschedule_wait += mechanics.reschedule_cost_s
            if verdict.exclude_node or node_id in cluster.broken:
                wait = cluster.replace(slot, now, excluded=verdict.exclude_node)
                excluded += verdict.exclude_node
                recovery += wait
                lost.reschedule_wait += wait
        elif node_id in cluster.broken:
            refail = (kind, slot)  # restarted in place on a node that is still broken
        if trace is None and refail is None:
            next_failure_t = now + _gap(node_rate * cluster.weight(), rng)
        now += recovery
    wall = min(now, duration_s) if not math.isinf(now) else duration_s
    return Outcome(wall_s=wall, useful_s=useful, interruptions=interruptions, lost=lost,
                   failed=failed, manual_interventions=manual, excluded_nodes=excluded,
                   by_kind=by_kind, max_failures_between_checkpoints=max_between)


def _gap(rate: float, rng: random.Random) -> float:
    return rng.expovariate(rate) if rate > 0 else math.inf


def _normaliser(model: FailureModel) -> float:
    """Scale the per-node rate so the average node fails at ``rate_per_gpu_s`` per GPU."""
    mean_weight = (1 - model.bad_fraction) + model.bad_fraction * model.bad_factor
    return 1.0 / mean_weight


def _run(seconds: float, tau: float, block: float, cost: float) -> tuple[float, int, float]:
    """Run ``seconds`` from the start of a running phase (right after a restore).

    Each interval ``tau`` is ``tau - block`` of training then ``block`` of blocking save;
    save j (1-based) snapshots the work at j * (tau - block) and is durable ``cost``
    seconds after it started (cost == block: a blocking save). Returns (work done,
    checkpoints made durable, work covered by the last durable one)."""
    if seconds <= 0:
        return 0.0, 0, 0.0
    compute = tau - block
    cycles, rest = divmod(seconds, tau)
    done = int(cycles) * compute + min(rest, compute)
    durable = max(0, math.floor((seconds + block - cost) / tau + 1e-12))
    return done, durable, durable * compute
