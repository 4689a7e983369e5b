// Option presets: AgentOptions::pbt() (Ray Tune's PopulationBasedTraining defaults).
#include "paramwin/agent_options.hpp"

namespace paramwin {

AgentOptions AgentOptions::pbt() {
  AgentOptions o;
  // Deaths: only PBT's bottom quantile, checked every perturbation interval. Ray Tune's
  // perturbation_interval defaults to 60 units of time_attr (seconds of training); steps are
  // this library's time, and 10 is the worst-fraction trigger's own default cadence.
  o.triggers.age.enabled = false;
  o.triggers.threshold.enabled = false;
  o.triggers.worst_fraction = {.enabled = true, .fraction = 0.25, .every = 10};
  o.triggers.warmup = 0;  // burn_in_period = 0
  o.triggers.cooldown = 0;
  // Exploit: one donor drawn uniformly from the top quantile (the same quantile_fraction),
  // copied whole.
  o.selection.kind = SelectionKind::truncation;
  o.selection.k = 1;
  o.selection.quantile = 0.0;  // follows triggers.worst_fraction.fraction
  o.mixing.kind = MixingKind::best;
  o.mixing.momentum = 0.0;
  // Explore: the donor's hyperparameters, resampled with probability 0.25 or multiplied by
  // 0.8 or 1.2; the rules (Ray's hyperparam_mutations) are the user's.
  o.explore.inherit = HyperInherit::best;
  o.explore.resample_probability = 0.25;
  o.explore.perturb_factors = {0.8, 1.2};
  return o;
}

}  // namespace paramwin
