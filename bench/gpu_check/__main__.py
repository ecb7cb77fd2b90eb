"""`python -m bench.gpu_check ...` (what scripts/gpu-check.sh runs)."""

from bench.gpu_check.cli import main

raise SystemExit(main())
