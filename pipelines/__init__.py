"""Builds the KFP pipeline from a validated spec (installed as pflpipe.pipelines).

`build_pipeline(spec)` returns the pipeline; `pflpipe run` calls it under kfp.local,
`pflpipe compile` and `pflpipe submit` compile it.
"""

from pflpipe.pipelines.graph import build_pipeline, personalize_labels

__all__ = ["build_pipeline", "personalize_labels"]
