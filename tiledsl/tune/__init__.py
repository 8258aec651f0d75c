"""Autotuning: `Config` (one candidate's constexprs and launch options), `autotune` (the decorator), the winners'
store on disk."""
