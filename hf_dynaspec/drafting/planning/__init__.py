"""Planning a round's draft from measured costs and learnt acceptance: the shared core (acceptance tables, the
rate-maximising length, round plans, probe schedules), the cost tables, the EAGLE drafter's planner and the
lattice sources' planner. Everything here imports from the core; nothing here drafts or verifies."""
