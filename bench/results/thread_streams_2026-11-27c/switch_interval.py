"""An experiment, kept for its result: the GIL switch interval set (SWI seconds) before the bench runs."""
import sys, os, runpy
if os.environ.get('SWI'): sys.setswitchinterval(float(os.environ['SWI']))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
