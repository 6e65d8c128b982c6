"""What a round costs on this machine, measured once and cached: the planners' input.

- `store`: the cache (calibration.json in hf-dynaspec's cache directory, an in-process memory, the checks an
  entry passes before it is trusted) and the fingerprint of a target that keys it;
- `timing`: how a cost is measured (one timer, the calibration context, verify forwards over n tokens);
- `verify_costs`: the target's verify table, one per target and CPU routing, read by every assistant's costs;
- `round_costs`: the EAGLE round's costs (`RoundCosts`, `round_costs`);
- `lattice_costs`: the lattice round's costs (`lattice_round_costs`);
- `verify_kernel`: whether the CPU rows kernel verifies faster here (`target_verify_kernel`).
"""
