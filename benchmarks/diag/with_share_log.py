"""side_by_side.py with the hybrid CPU share logged (DEBUG): python benchmarks/diag/with_share_log.py WORKLOAD IMPL DATA"""
import logging, runpy, sys
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
logging.getLogger("sluice.backends.image.hybrid").setLevel(logging.DEBUG)
sys.argv = ["side_by_side.py"] + sys.argv[1:]
runpy.run_path("benchmarks/peers/side_by_side.py", run_name="__main__")
