"""The component image: where a stage runs unless the spec's `resources.image` says otherwise.

`pflpipe.pipelines` binds every task to the spec's image (per stage); this default only matters
for a component compiled or run on its own. It equals the spec's default `resources.image`.
"""

PFLPIPE_IMAGE = "pflpipe:0.1.0-cpu"
