"""The study: Optuna ask/tell loop, objective, constraints, stability and export."""
