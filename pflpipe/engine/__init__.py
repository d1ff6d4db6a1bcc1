"""The batched training engine: many clients (or runs) as one vectorized model (torch.func).

It imports no algorithm; an algorithm reaches it through the hooks of `pflpipe.engine.protocol`.
"""
