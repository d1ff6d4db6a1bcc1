"""The pipeline stages, one module each, with `run(spec, ..., tracker=NULL_TRACKER)`.

Components call these; every stage is testable as a plain function without kfp.
"""
