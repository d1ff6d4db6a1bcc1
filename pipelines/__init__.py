"""Builds the KFP pipeline from a validated spec (installed as pflpipe.pipelines)."""
