"""``gnnbridge serve``: a trained run behind HTTP, on FastAPI and uvicorn (the ``serve`` extra).

What is computed lives in core (:class:`gnnbridge.core.app.serving.Served`, backend-neutral);
this package is only the web layer: routes, the JSON of errors, the body limit, the batching
window and the server's start and stop. Nothing here is imported until ``serve`` runs, so the
rest of gnnbridge never needs FastAPI.
"""
