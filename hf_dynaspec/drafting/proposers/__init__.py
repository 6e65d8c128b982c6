"""The proposers a round chooses among: each one class that offers a draft, drafts it, catches up on the verified
positions, prices its offer for the planner and teaches its own acceptance tables (see hf_dynaspec.drafting.round)."""
