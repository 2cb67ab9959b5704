//! Metric-driven, scheduled and predictive scaling as pure pieces: each policy proposes a desired node count for a
//! pool, and [`combine`] turns the proposals into one size with the policy that won and why. Nothing here reads a
//! clock or keeps global state; times come in as [`crate::time::Time`] values.
//!
//! ```text
//! node metrics ──warm_average──> TargetTracking::propose ───┐
//! metric samples ──StepState::observe──> StepScaling::propose ┼─> [Proposal] ──combine──> Decision ──gate──> size
//! demand history ──forecast::fit──> Model::forecast ────────┘        (any out, all in)     (cooldowns)
//! ```

pub mod forecast;
pub(crate) mod history;
pub mod step_scaling;
pub mod target_tracking;

/// One policy's wish for a pool's size.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// Which policy proposes, e.g. `target_tracking:gpu_util` or `step:gpu_util`.
    pub policy: String,
    /// The node count the policy wants.
    pub desired_nodes: u32,
    /// A sentence for people: what the policy saw.
    pub detail: String,
}

/// Why [`combine`] chose the size it did; stable codes for the event log and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CombineCode {
    /// At least one policy wants more nodes: the largest such proposal wins.
    AnyPolicyOut,
    /// Every policy wants fewer nodes: the largest (most cautious) proposal wins.
    AllPoliciesIn,
    /// Some policy wants fewer nodes but another wants the current size: nothing changes.
    ScaleInVetoed,
    /// Every policy wants the current size.
    AtTarget,
    /// No policy proposed anything (no metric yet): nothing changes.
    NoProposals,
}

impl CombineCode {
    /// Returns the stable snake_case code.
    pub fn as_str(self) -> &'static str {
        match self {
            CombineCode::AnyPolicyOut => "any_policy_out",
            CombineCode::AllPoliciesIn => "all_policies_in",
            CombineCode::ScaleInVetoed => "scale_in_vetoed",
            CombineCode::AtTarget => "at_target",
            CombineCode::NoProposals => "no_proposals",
        }
    }
}

/// The combined size for a pool, before cooldowns and the pool's min, max and step limits apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub desired_nodes: u32,
    pub code: CombineCode,
    /// The policy whose proposal decided (for a veto: the policy that held the size); `None` without proposals.
    pub policy: Option<String>,
    /// A sentence for people, quoting the winning proposal.
    pub detail: String,
}

/// Decides a pool's size from the policies' proposals: scale out when ANY policy asks (to the largest proposal),
/// scale in only when ALL policies agree (to the largest of their proposals, so the most cautious one wins).
/// Adding capacity late costs queue wait, removing it early costs a boot, so one policy suffices to grow and all
/// must agree to shrink (the rule AWS applies to several target-tracking policies). Ties go to the earlier proposal.
pub fn combine(proposals: &[Proposal], current: u32) -> Decision {
    // The first proposal with the largest size: max_by_key keeps the last maximum, so compare on reversed index.
    let largest = proposals.iter().enumerate().max_by_key(|(i, p)| (p.desired_nodes, std::cmp::Reverse(*i)));
    let Some((_, top)) = largest else {
        return Decision {
            desired_nodes: current,
            code: CombineCode::NoProposals,
            policy: None,
            detail: "no policy proposed a size".into(),
        };
    };
    let (code, winner) = if top.desired_nodes > current {
        (CombineCode::AnyPolicyOut, top)
    } else if top.desired_nodes < current {
        (CombineCode::AllPoliciesIn, top)
    } else if proposals.iter().any(|p| p.desired_nodes < current) {
        (CombineCode::ScaleInVetoed, top)
    } else {
        (CombineCode::AtTarget, top)
    };
    let verb = match code {
        CombineCode::AnyPolicyOut => format!("scale out {current} -> {}", winner.desired_nodes),
        CombineCode::AllPoliciesIn => {
            format!("scale in {current} -> {} (all {} policies agree)", winner.desired_nodes, proposals.len())
        }
        CombineCode::ScaleInVetoed => format!("hold at {current}: scale-in vetoed"),
        _ => format!("hold at {current}"),
    };
    Decision {
        desired_nodes: winner.desired_nodes,
        code,
        policy: Some(winner.policy.clone()),
        detail: format!("{verb} by {}: {}", winner.policy, winner.detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(policy: &str, desired_nodes: u32) -> Proposal {
        Proposal { policy: policy.into(), desired_nodes, detail: String::new() }
    }

    #[test]
    #[allow(clippy::type_complexity)] // a table of cases reads best inline
    fn any_policy_scales_out_and_all_must_agree_to_scale_in() {
        let cases: [(&str, Vec<Proposal>, u32, u32, CombineCode, Option<&str>); 8] = [
            (
                "one policy asking for more is enough",
                vec![p("a", 8), p("b", 12)],
                10,
                12,
                CombineCode::AnyPolicyOut,
                Some("b"),
            ),
            (
                "the largest scale-out wins",
                vec![p("a", 14), p("b", 12), p("c", 3)],
                10,
                14,
                CombineCode::AnyPolicyOut,
                Some("a"),
            ),
            (
                "all below: the largest (most cautious) wins",
                vec![p("a", 6), p("b", 8)],
                10,
                8,
                CombineCode::AllPoliciesIn,
                Some("b"),
            ),
            (
                "one policy at the current size vetoes scale-in",
                vec![p("a", 6), p("b", 10)],
                10,
                10,
                CombineCode::ScaleInVetoed,
                Some("b"),
            ),
            ("all at the current size hold", vec![p("a", 10), p("b", 10)], 10, 10, CombineCode::AtTarget, Some("a")),
            (
                "ties go to the earlier proposal",
                vec![p("a", 12), p("b", 12)],
                10,
                12,
                CombineCode::AnyPolicyOut,
                Some("a"),
            ),
            ("a single policy may scale in alone", vec![p("a", 0)], 3, 0, CombineCode::AllPoliciesIn, Some("a")),
            ("no proposals hold the current size", vec![], 7, 7, CombineCode::NoProposals, None),
        ];
        for (rule, proposals, current, size, code, policy) in cases {
            let d = combine(&proposals, current);
            assert_eq!((d.desired_nodes, d.code, d.policy.as_deref()), (size, code, policy), "{rule}");
        }
    }

    #[test]
    fn the_detail_names_the_winner_and_the_code_is_stable() {
        let d = combine(
            &[Proposal { policy: "target_tracking:gpu_util".into(), desired_nodes: 6, detail: "util 0.90".into() }],
            4,
        );
        assert_eq!(d.detail, "scale out 4 -> 6 by target_tracking:gpu_util: util 0.90");
        assert_eq!(d.code.as_str(), "any_policy_out");
    }
}
