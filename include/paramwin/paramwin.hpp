#pragma once
/// @file paramwin.hpp
/// Umbrella header: everything a trainer needs.

#include "paramwin/agent.hpp"
#include "paramwin/agent_interface.hpp"
#include "paramwin/dtype.hpp"
#include "paramwin/error.hpp"
#include "paramwin/event.hpp"
#include "paramwin/explore.hpp"
#include "paramwin/group_agent.hpp"
#include "paramwin/groups.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/pause_guard.hpp"
#include "paramwin/policy.hpp"
#include "paramwin/report.hpp"
#include "paramwin/roster.hpp"
#include "paramwin/shard_plan.hpp"
#include "paramwin/timer_summary.hpp"
#include "paramwin/window.hpp"
