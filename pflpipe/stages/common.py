"""What the training stages share, by concern (docs/contracts.md).

Each concern has its module: `prepare` (the partition on the engine, the model, context and
trainer), `rows` (the tables' rows from the engine's scores), `resume` (checkpoints, resuming,
running the rounds), `results` (writing a results directory) and `progress` (per-client MLflow
runs); a round's progress event is `pflpipe.events.round_progress`. The file names are
`pflpipe.layout`'s. This module re-exports them under the names the stages have always used
(``common.setup``, ``common.write_results``, ...).
"""

from pflpipe.events import round_progress  # noqa: F401
from pflpipe.layout import (  # noqa: F401
    HISTORY_CSV,
    RESULTS_CSV,
    SHARD_JSON,
    SUMMARY_MD,
    client_file,
    round_file,
)
from pflpipe.stages.prepare import (  # noqa: F401
    Setup,
    client_shards,
    device_of,
    engine_key,
    has_validation,
    optimizer,
    plan_settings,
    scored_splits,
    setup,
    use_compile,
    use_threads,
)
from pflpipe.stages.progress import log_clients  # noqa: F401
from pflpipe.stages.results import client_models, write_csv, write_results, write_shard  # noqa: F401
from pflpipe.stages.resume import (  # noqa: F401
    CHECKPOINT_FORMAT,
    RESUME,
    checkpoint_store,
    federate,
    load_round,
    use_checkpoints,
)
from pflpipe.stages.rows import (  # noqa: F401
    HISTORY_FIELDS,
    RESULT_FIELDS,
    client_test_accuracies,
    compute_totals,
    federation_rows,
    history_rows,
    mean_by_round,
    mean_test_accuracy,
    scored_rows,
)
from pflpipe.stages.tables import read_csv  # noqa: F401
