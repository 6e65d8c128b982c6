"""The policies a round chooses its draft by: the shared core (acceptance tables, the rate-maximising length, offers
and round plans, probe schedules, the cost tables), the planner of `draft_plan="auto"` (every drafter's offers,
priced from measured costs and learnt acceptance) and the fixed order. Everything here imports from the core;
nothing here drafts or verifies."""
