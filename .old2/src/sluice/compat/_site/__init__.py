"""The sitecustomize that `python -m sluice.compat` puts on its child processes' PYTHONPATH (see
``sitecustomize.py``); a package only so that wheels ship it."""
