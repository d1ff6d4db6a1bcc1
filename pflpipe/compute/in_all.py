"""What each reported model cost in all: its own compute plus the warm start it started from.

docs/contracts.md ("Compute") defines the counts. A model trained from the FedAvg warm start
(``warm_start: final``, or a round r) also cost the warm start's training up to that round, so
its compute *in all* is its own plus FedAvg's rounds 1..r, per seed, then the mean over seeds.
PersFL reads every warm-start round (its teachers): it carries the whole warm start. The report's
compute table, its unequal-compute message, its rounds row and its accuracy-against-samples
figure all count in all.

Unequal compute (`mismatch`) compares the models other than the baselines, in all, on samples
processed. A gap is **by design** when the spec's schedules would not make it: the passes over
the clients' training data the settings schedule (`Plan.scheduled`: rounds × local epochs ×
client fraction, the epochs of clients training alone, PersFL's distillation epochs, plus the
warm start's) differ by no more than the allowed factor, so the gap comes from what the method
does per pass (Ditto's personal model, pFedMe's K inner steps, PersFL's grid of students).
Matching rounds cannot remove such a gap, and the message says so instead of asking for it.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pflpipe.compute.totals import MATCHED_ON
from pflpipe.engine.records import COMPUTE


@dataclass(frozen=True)
class Plan:
    """What the spec scheduled for each model, to count and explain its compute.

    Attributes:
        warm_start: The warm start's model name.
        rounds: The warm start's rounds.
        starts: Model → the warm-start round it started from; a model not named started from
            scratch (the seeded initial model).
        epochs: Model → its own passes over every client's training data that its settings
            schedule, per client (rounds × local epochs × client fraction; the epochs of a model
            whose clients train alone; PersFL's distillation epochs).
        described: Model → how long it trained, in words (the report's rounds row).
        train_samples: One pass over every client's training rows (mean over seeds).

    """

    warm_start: str = "fedavg"
    rounds: int = 0
    starts: Mapping[str, int] = field(default_factory=dict)
    epochs: Mapping[str, float] = field(default_factory=dict)
    described: Mapping[str, str] = field(default_factory=dict)
    train_samples: float = 0.0

    def scheduled(self, model: str) -> float:
        """Passes over the data the settings schedule for `model`, its warm start's included.

        >>> Plan(rounds=40, starts={"fedper": 40}, epochs={"fedavg": 40, "fedper": 40}
        ...      ).scheduled("fedper")
        80.0
        """
        per_round = self.epochs.get(self.warm_start, 0.0) / self.rounds if self.rounds else 0.0
        return float(self.epochs.get(model, 0.0) + self.starts.get(model, 0) * per_round)

    def passes(self, model: str, own_samples: float) -> float | None:
        """Network passes per sample and scheduled epoch: FedAvg's are 1, Ditto's 2.

        >>> Plan(epochs={"ditto": 3}, train_samples=100).passes("ditto", 600.0)
        2.0
        """
        epochs = self.epochs.get(model, 0.0)
        if not epochs or self.train_samples <= 0:
            return None
        return own_samples / (epochs * self.train_samples)


def _sums(history: Iterable[dict]) -> dict[str, dict[str, dict[int, dict[str, float]]]]:
    """Model → seed → round → each compute count summed over the round's train rows."""
    out: dict[str, dict[str, dict[int, dict[str, float]]]] = {}
    for row in history:
        counted = {name: float(row[name]) for name in COMPUTE if row.get(name) not in (None, "")}
        if not counted:
            continue
        rounds = out.setdefault(row["model"], {}).setdefault(str(row.get("seed", "")), {})
        into = rounds.setdefault(int(row.get("round") or 0), dict.fromkeys(COMPUTE, 0.0))
        for name, value in counted.items():
            into[name] += value
    return out


def _through(rounds: Mapping[int, Mapping[str, float]], last: int | None = None
             ) -> dict[str, float]:
    """Each count summed over `rounds` up to and including `last` (all when None)."""
    return {name: sum(counts[name] for r, counts in rounds.items() if last is None or r <= last)
            for name in COMPUTE}


def warm_start_counts(history: Iterable[dict], plan: Plan) -> dict[str, dict[str, dict]]:
    """Model → seed → the warm start's compute up to the round the model started from.

    >>> rows = [{"model": "fedavg", "seed": 0, "round": r, "samples": 10} for r in (1, 2, 3)]
    >>> warm_start_counts(rows + [{"model": "b", "seed": 0, "round": 1, "samples": 5}],
    ...                   Plan(rounds=3, starts={"b": 2}))["b"]["0"]["samples"]
    20.0
    """
    sums = _sums(history)
    warm = sums.get(plan.warm_start, {})
    return {model: {seed: _through(warm.get(seed, {}), plan.starts.get(model, 0))
                    for seed in seeds}
            for model, seeds in sums.items() if plan.starts.get(model, 0) > 0}


def in_all(history: Iterable[dict], plan: Plan) -> dict[str, dict[str, float]]:
    """Per model, each compute count in all (its own plus its warm start's), mean over seeds.

    >>> rows = [{"model": "fedavg", "seed": 0, "round": r, "samples": 10} for r in (1, 2, 3)]
    >>> rows += [{"model": "b", "seed": 0, "round": 1, "samples": 5}]
    >>> in_all(rows, Plan(rounds=3, starts={"b": 3}))["b"]["samples"]
    35.0
    """
    history = list(history)
    sums, warm = _sums(history), warm_start_counts(history, plan)
    out = {}
    for model, seeds in sums.items():
        totals = [_through(rounds) for rounds in seeds.values()]
        added = [warm.get(model, {}).get(seed, dict.fromkeys(COMPUTE, 0.0)) for seed in seeds]
        out[model] = {name: sum(t[name] + a[name] for t, a in zip(totals, added, strict=True))
                      / len(totals) for name in COMPUTE}
    return out


def starting_samples(history: Iterable[dict], plan: Plan) -> dict[tuple[str, str], float]:
    """(model, seed) → the samples its warm start had processed when the model started."""
    return {(model, seed): counts[MATCHED_ON]
            for model, seeds in warm_start_counts(history, plan).items()
            for seed, counts in seeds.items()}


@dataclass(frozen=True)
class Mismatch:
    """The unequal-compute message and whether the gap is by design (a note, not a warning).

    `text` is the report's; `line` what a run prints once: the text itself for a warning, a
    sentence pointing at the report for a gap by design.
    """

    text: str
    by_design: bool
    line: str = ""


def mismatch(totals: Mapping[str, Mapping[str, float]], baselines: Sequence[str], factor: float,
             plan: Plan | None = None, own: Mapping[str, Mapping[str, float]] | None = None
             ) -> Mismatch | None:
    """Say when the compared models' samples processed in all differ by more than `factor`.

    `totals` are counts in all (`in_all`), `own` each model's own (without its warm start; the
    totals when not given); without a `plan` nothing says where a gap comes from.

    >>> print(mismatch({"a": {"samples": 100.0}, "b": {"samples": 10.0},
    ...                 "local": {"samples": 1.0}}, ["local"], 1.5).text[:58])
    Unequal compute: a processed 10× the samples of b, more th
    """
    compared = {m: c[MATCHED_ON] for m, c in totals.items() if m not in baselines}
    if len(compared) < 2:
        return None
    least = min(compared, key=compared.get)
    over = [m for m, v in sorted(compared.items(), key=lambda kv: -kv[1])
            if v > factor * compared[least]]
    if not over:
        return None
    ratios = ", ".join(f"{m} processed {ratio(compared[m], compared[least])}×" for m in over)
    warm = " (the FedAvg warm start included)" if plan and any(
        plan.starts.get(m, 0) for m in (*over, least)) else ""
    head = (f"{ratios} the samples of {least}{warm}, more than the {factor:g}× "
            "evaluation.compute_mismatch allows")
    if plan is None or not plan.epochs:
        return Mismatch(f"Unequal compute: {head}; their scores compare compute as well as "
                        "method. Match them with client_fraction, rounds, local_epochs or "
                        "warm_start where their settings differ.", False)
    design = [m for m in over if plan.scheduled(m) <= factor * plan.scheduled(least)]
    parts = [f"{'Compute by design' if len(design) == len(over) else 'Unequal compute'}: {head}."]
    for model in over:
        parts.append(_explained(model, least, compared[model] / compared[least], plan,
                                (own or totals)[model][MATCHED_ON]))
    if len(design) < len(over):
        parts.append("Match the settings (rounds, local_epochs, client_fraction, warm_start) "
                     "to compare the methods at equal compute.")
    if design:
        parts.append(f"Matching rounds would not remove a method's own cost: read "
                     f"{_names(design)}'s scores as those of a method that costs more "
                     f"({', '.join(f'{m} {ratio(compared[m], compared[least])}×' for m in design)}"
                     f" {least}'s compute).")
    text = " ".join(part for part in parts if part)
    if len(design) < len(over):
        return Mismatch(text, False, text)
    return Mismatch(text, True, _by_design(design, least, compared, plan, own or totals, warm))


def _by_design(design: Sequence[str], least: str, compared: Mapping[str, float], plan: Plan,
               own: Mapping[str, Mapping[str, float]], warm: str) -> str:
    """The one line a run prints for a gap by design: the ratios, the passes, what they mean."""
    each = []
    for model in design:
        passes = plan.passes(model, own[model][MATCHED_ON])
        how = (f"its method makes {passes:.3g} network passes per sample and epoch where FedAvg "
               "makes 1" if passes else "its method processes more per epoch")
        each.append(f"{model} processed {ratio(compared[model], compared[least])}× the samples "
                    f"of {least}{', the warm start included' if warm else ''}: by design, {how}")
    return (f"compute: {'; '.join(each)}. Read {_names(design)}'s scores as those of a method "
            "that costs more; no setting removes that (the report's Compute section).")


def _explained(model: str, least: str, times: float, plan: Plan, own_samples: float) -> str:
    """Where `model`'s `times` × `least`'s samples come from: its settings × its method."""
    scheduled, theirs = plan.scheduled(model), plan.scheduled(least)
    if scheduled <= 0 or theirs <= 0:
        return ""
    settings = scheduled / theirs
    passes = plan.passes(model, own_samples)
    per_sample = (f" ({passes:.3g} network passes per sample where FedAvg makes 1)"
                  if passes is not None else "")
    return (f"{model}: its settings schedule {settings:.3g}× {least}'s passes over the clients' "
            f"data ({scheduled:.3g} against {theirs:.3g} epochs, warm start included), and each "
            f"pass costs it {times / settings:.3g}× as much as {least}'s{per_sample}.")


def _names(models: Sequence[str]) -> str:
    return ", ".join(models)


def ratio(value: float, least: float) -> str:
    """`value` / `least` to 3 significant digits; ∞ when `least` is 0.

    >>> ratio(144000, 100700), ratio(1.0, 0.0)
    ('1.43', '∞')
    """
    return "∞" if least <= 0 else f"{value / least:.3g}"


def plan(spec, records: dict[str, dict] | None = None, train_samples: float = 0.0) -> Plan:
    """Every trained model's schedule: its starting warm-start round, its epochs, in words.

    A tuned entry counts with the setting chosen for it (`records`: each tuned entry's tuning
    record); where its grid chose the rounds (or epochs), the words say so and on which seeds.
    `train_samples`: one pass over every client's training rows (the partition's).

    >>> from pflpipe.spec import Spec
    >>> p = plan(Spec.model_validate({
    ...     "experiment": {"name": "t"}, "dataset": {"name": "digits"},
    ...     "partition": {"strategy": "ds1", "n_clients": 2}, "federation": {"rounds": 30},
    ...     "personalization": [{"name": "fedper"}, {"name": "ditto", "warm_start": "none"},
    ...                         {"name": "fedavg_ft", "epochs": 2}]}))
    >>> print("; ".join(p.described.values()))
    fedavg 30 rounds; local 20 epochs; fedper 30 + 30 warm-start rounds; ditto 30 rounds; \
fedavg_ft 2 epochs + 30 warm-start rounds
    >>> p.starts["fedper"], p.epochs["ditto"], p.scheduled("fedavg_ft")
    (30, 30.0, 32.0)
    """
    from pflpipe.spec.tuning import rounds_field, with_values

    records = records or {}
    fed = spec.federation
    described = {"fedavg": f"fedavg {fed.rounds} rounds"}
    epochs = {"fedavg": float(fed.rounds * fed.local_epochs * fed.client_fraction)}
    starts: dict[str, int] = {}
    if spec.runs_local:
        local = spec.local_params
        described[local.display_name] = f"{local.display_name} {local.epochs} epochs"
        epochs[local.display_name] = float(local.epochs)
    for entry in spec.personalization:
        label = entry.display_name
        if entry.name == "local":
            continue
        if entry.name == "persfl":   # its results carry the objective's name (persfl_gd)
            label = spec.distillation.model_name
            starts[label] = fed.rounds   # its teachers are every warm-start round
            epochs[label] = float(spec.distillation.epochs)
            described[label] = (f"{label} {spec.distillation.epochs} distillation epochs + "
                                f"{fed.rounds} warm-start rounds")
            continue
        chosen = records[label]["entries"][label]["chosen"] if label in records else {}
        entry = with_values(entry, chosen)
        counted = entry.rounds_of(fed)
        start = _start(entry.warm_start, fed.rounds)
        if start:
            starts[label] = start
        epochs[label] = float(counted.rounds * counted.local_epochs * counted.client_fraction)
        unit = "epochs" if rounds_field(entry) == "epochs" else "rounds"
        part = f"{label} {counted.rounds} {unit[:-1] if counted.rounds == 1 else unit}"
        if rounds_field(entry) in chosen:
            seeds = ", ".join(map(str, records[label]["seeds"]))
            part += f" (tuned on tuning seed(s) {seeds})"
        elif spec.tuning and label not in records and (tuned := spec.tuning.find(label)) \
                and rounds_field(entry) in tuned.grid:
            part = f"{label}: {rounds_field(entry)} tuned, the choice is not in these results"
        if start:
            part = (f"{label} {counted.rounds} + {start} warm-start rounds"
                    if part == f"{label} {counted.rounds} rounds"
                    else f"{part} + {start} warm-start rounds")
        described[label] = part
    return Plan("fedavg", fed.rounds, starts, epochs, described, train_samples)


def _start(warm_start, rounds: int) -> int:
    """The warm-start round an entry starts from: 'final' → the last, 'none' → 0 (scratch)."""
    if warm_start == "final":
        return rounds
    if warm_start == "none":
        return 0
    return int(warm_start)
