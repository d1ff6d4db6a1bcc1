"""KFP v2 components: one thin shim per pipeline stage (installed as pflpipe.components)."""
