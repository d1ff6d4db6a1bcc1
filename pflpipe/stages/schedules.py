"""What a spec schedules for each model it trains: where it starts and how long it trains.

The report reads it to count each model's compute in all, the warm start included
(`pflpipe.metrics.cost`), and to say how long each model trained (its rounds row).
"""

from pflpipe.metrics.cost import Plan


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
