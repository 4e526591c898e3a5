//! `KubeSchedulerConfiguration` (kubescheduler.config.k8s.io/v1), the successor of the
//! reference document's `--policy-config-file`: profiles by schedulerName, each enabling or
//! disabling filter and score plugins (`'*'` for all) and setting score weights;
//! `percentageOfNodesToScore` globally or per profile; `leaderElection.leaderElect`.

use serde_json::Value;

use crate::affinity::SpreadDefaults;
use crate::plugins::{ScoringStrategy, ScoringType};

/// Filter plugins in upstream's order.
pub const FILTERS: &[&str] = &[
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "PodTopologySpread",
    "InterPodAffinity",
];

/// Score plugins with upstream's default weights.
pub const SCORES: &[(&str, i64)] = &[
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodeResourcesFit", 1),
    ("NodeResourcesBalancedAllocation", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("ImageLocality", 1),
];

#[derive(Clone, Debug, PartialEq)]
pub struct ProfileConfig {
    pub scheduler_name: String,
    pub filters: Vec<String>,
    pub scores: Vec<(String, i64)>,
    /// 1..=100; `None` for upstream's adaptive share.
    pub percentage_of_nodes_to_score: Option<u32>,
    /// NodeResourcesFit's `scoringStrategy` (pluginConfig).
    pub fit_scoring: ScoringStrategy,
    /// PodTopologySpread's constraints for pods without their own (pluginConfig).
    pub spread_defaults: SpreadDefaults,
}

impl ProfileConfig {
    pub fn default_for(name: &str) -> Self {
        Self {
            scheduler_name: name.into(),
            filters: FILTERS.iter().map(|s| s.to_string()).collect(),
            scores: SCORES.iter().map(|(n, w)| (n.to_string(), *w)).collect(),
            percentage_of_nodes_to_score: None,
            fit_scoring: ScoringStrategy::default(),
            spread_defaults: SpreadDefaults::System,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulerConfig {
    pub profiles: Vec<ProfileConfig>,
    pub leader_elect: Option<bool>,
}

fn names(v: &Value) -> Vec<(String, Option<i64>)> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["name"].as_str()?.to_string(), p["weight"].as_i64())))
        .collect()
}

/// Apply one extension point's `disabled` then `enabled` lists to `current`.
fn apply(
    point: &Value,
    known: &[&str],
    current: &mut Vec<(String, i64)>,
    default_weight: impl Fn(&str) -> i64,
    profile: &str,
) -> Result<(), String> {
    for (name, _) in names(&point["disabled"]) {
        if name == "*" {
            current.clear();
        } else {
            current.retain(|(n, _)| *n != name);
        }
    }
    for (name, weight) in names(&point["enabled"]) {
        if !known.contains(&name.as_str()) {
            return Err(format!("profile \"{profile}\": plugin \"{name}\" does not exist"));
        }
        let w = weight.unwrap_or_else(|| default_weight(&name));
        match current.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = w,
            None => current.push((name, w)),
        }
    }
    Ok(())
}

/// `NodeResourcesFitArgs`' scoringStrategy, checked as upstream's
/// `ValidateNodeResourcesFitArgs` does.
fn fit_args(args: &Value) -> Result<ScoringStrategy, String> {
    let st = &args["scoringStrategy"];
    if st.is_null() {
        return Ok(ScoringStrategy::default());
    }
    let mut resources = Vec::new();
    for (i, r) in st["resources"].as_array().into_iter().flatten().enumerate() {
        let name = r["name"].as_str().unwrap_or("").to_string();
        let weight = r["weight"].as_i64().unwrap_or(0);
        if !(1..=100).contains(&weight) {
            return Err(format!(
                "scoringStrategy.resources[{i}].weight: Invalid value: {weight}: resource weight of {name} not in valid range [1, 100]"
            ));
        }
        resources.push((name, weight));
    }
    if resources.is_empty() {
        resources = ScoringStrategy::default().resources;
    }
    let kind = match st["type"].as_str().unwrap_or("LeastAllocated") {
        "LeastAllocated" => ScoringType::LeastAllocated,
        "MostAllocated" => ScoringType::MostAllocated,
        "RequestedToCapacityRatio" => {
            let points = st["requestedToCapacityRatio"]["shape"].as_array().cloned().unwrap_or_default();
            if points.is_empty() {
                return Err("scoringStrategy.requestedToCapacityRatio.shape: Required value: at least one point must be specified".into());
            }
            let mut shape: Vec<(i64, i64)> = Vec::new();
            for (i, pt) in points.iter().enumerate() {
                let (u, sc) = (pt["utilization"].as_i64().unwrap_or(0), pt["score"].as_i64().unwrap_or(0));
                if !(0..=100).contains(&u) {
                    return Err(format!(
                        "scoringStrategy.requestedToCapacityRatio.shape[{i}].utilization: Invalid value: {u}: not in valid range [0, 100]"
                    ));
                }
                if shape.last().is_some_and(|&(prev, _)| u <= prev) {
                    return Err(format!(
                        "scoringStrategy.requestedToCapacityRatio.shape[{i}].utilization: Invalid value: {u}: utilization values must be sorted in increasing order"
                    ));
                }
                if !(0..=10).contains(&sc) {
                    return Err(format!(
                        "scoringStrategy.requestedToCapacityRatio.shape[{i}].score: Invalid value: {sc}: not in valid range [0, 10]"
                    ));
                }
                shape.push((u, sc));
            }
            ScoringType::RequestedToCapacityRatio(shape)
        }
        other => {
            return Err(format!(
                "scoringStrategy.type: Unsupported value: \"{other}\": supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\""
            ))
        }
    };
    Ok(ScoringStrategy { kind, resources })
}

/// `PodTopologySpreadArgs`: `defaultingType` System (the default) or List with
/// `defaultConstraints` (which System does not take), as upstream validates them.
fn spread_args(args: &Value) -> Result<SpreadDefaults, String> {
    let given = args["defaultConstraints"].as_array().cloned().unwrap_or_default();
    match args["defaultingType"].as_str().unwrap_or("System") {
        "System" if !given.is_empty() => {
            Err("defaultConstraints: Invalid value: \"...\": when .defaultingType is \"System\", .defaultConstraints must be empty".into())
        }
        "System" => Ok(SpreadDefaults::System),
        "List" => {
            let mut out = Vec::new();
            for (i, c) in given.iter().enumerate() {
                if c.get("labelSelector").is_some() {
                    return Err(format!(
                        "defaultConstraints[{i}].labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"
                    ));
                }
                let c: k8s_openapi::api::core::v1::TopologySpreadConstraint = serde_json::from_value(c.clone())
                    .map_err(|e| format!("defaultConstraints[{i}]: {e}"))?;
                if c.max_skew <= 0 {
                    return Err(format!(
                        "defaultConstraints[{i}].maxSkew: Invalid value: {}: must be greater than zero",
                        c.max_skew
                    ));
                }
                if c.topology_key.is_empty() {
                    return Err(format!("defaultConstraints[{i}].topologyKey: Required value: can not be empty"));
                }
                if !matches!(c.when_unsatisfiable.as_str(), "DoNotSchedule" | "ScheduleAnyway") {
                    return Err(format!(
                        "defaultConstraints[{i}].whenUnsatisfiable: Unsupported value: \"{}\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
                        c.when_unsatisfiable
                    ));
                }
                out.push(c);
            }
            Ok(SpreadDefaults::List(out))
        }
        other => Err(format!(
            "defaultingType: Unsupported value: \"{other}\": supported values: \"List\", \"System\""
        )),
    }
}

/// Parse a KubeSchedulerConfiguration document (YAML or JSON).
pub fn parse(text: &str) -> Result<SchedulerConfig, String> {
    let doc: Value =
        serde_saphyr::from_str(text).map_err(|e| format!("invalid scheduler configuration: {e}"))?;
    let api_version = doc["apiVersion"].as_str().unwrap_or("");
    if api_version != "kubescheduler.config.k8s.io/v1" || doc["kind"] != "KubeSchedulerConfiguration" {
        return Err(format!(
            "scheduler configuration must be kind KubeSchedulerConfiguration of apiVersion kubescheduler.config.k8s.io/v1, not {:?} {:?}",
            doc["kind"].as_str().unwrap_or(""),
            api_version
        ));
    }
    let global_pct = doc["percentageOfNodesToScore"].as_u64().map(|p| p as u32);
    let mut profiles = Vec::new();
    let list = doc["profiles"].as_array().cloned().unwrap_or_default();
    let list = if list.is_empty() { vec![Value::Null] } else { list };
    for p in list {
        let name = p["schedulerName"]
            .as_str()
            .unwrap_or(crate::DEFAULT_SCHEDULER)
            .to_string();
        if profiles.iter().any(|x: &ProfileConfig| x.scheduler_name == name) {
            return Err(format!("duplicate profile with scheduler name \"{name}\""));
        }
        let mut profile = ProfileConfig::default_for(&name);
        let plugins = &p["plugins"];
        let score_weight = |n: &str| SCORES.iter().find(|(s, _)| *s == n).map(|(_, w)| *w).unwrap_or(1);
        let mut filters: Vec<(String, i64)> = profile.filters.iter().map(|f| (f.clone(), 0)).collect();
        // multiPoint applies to every extension point the plugin has.
        for point in [&plugins["multiPoint"], &plugins["filter"]] {
            apply(point, FILTERS, &mut filters, |_| 0, &name)?;
        }
        for point in [&plugins["multiPoint"], &plugins["score"]] {
            apply(
                point,
                &SCORES.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
                &mut profile.scores,
                score_weight,
                &name,
            )?;
        }
        profile.filters = filters.into_iter().map(|(n, _)| n).collect();
        for (i, pc) in p["pluginConfig"].as_array().into_iter().flatten().enumerate() {
            let plugin = pc["name"].as_str().unwrap_or("");
            let at = format!("profiles[{}].pluginConfig[{i}]", profiles.len());
            match plugin {
                "NodeResourcesFit" => {
                    profile.fit_scoring = fit_args(&pc["args"]).map_err(|e| format!("{at}.args.{e}"))?;
                }
                "PodTopologySpread" => {
                    profile.spread_defaults =
                        spread_args(&pc["args"]).map_err(|e| format!("{at}.args.{e}"))?;
                }
                p if FILTERS.contains(&p) || SCORES.iter().any(|(n, _)| *n == p) => {
                    // Args of the other plugins are not read (r8s has none of their options).
                }
                other => {
                    return Err(format!(
                        "{at}.name: Invalid value: \"{other}\": plugin does not exist"
                    ))
                }
            }
        }
        profile.percentage_of_nodes_to_score = p["percentageOfNodesToScore"]
            .as_u64()
            .map(|p| p as u32)
            .or(global_pct);
        if let Some(pct) = profile.percentage_of_nodes_to_score {
            if pct > 100 {
                return Err(format!(
                    "percentageOfNodesToScore: Invalid value: {pct}: not in valid range [0-100]"
                ));
            }
        }
        profiles.push(profile);
    }
    Ok(SchedulerConfig {
        profiles,
        leader_elect: doc["leaderElection"]["leaderElect"].as_bool(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_enable_disable_and_weigh_plugins() {
        let cfg = parse(
            r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
percentageOfNodesToScore: 30
profiles:
- schedulerName: default-scheduler
- schedulerName: packer
  plugins:
    score:
      disabled:
      - name: '*'
      enabled:
      - name: NodeResourcesFit
        weight: 5
    filter:
      disabled:
      - name: TaintToleration
"#,
        )
        .unwrap();
        assert_eq!(cfg.leader_elect, Some(false));
        assert_eq!(cfg.profiles.len(), 2);
        assert_eq!(
            cfg.profiles[0],
            ProfileConfig {
                percentage_of_nodes_to_score: Some(30),
                ..ProfileConfig::default_for("default-scheduler")
            }
        );
        let packer = &cfg.profiles[1];
        assert_eq!(packer.scores, [("NodeResourcesFit".to_string(), 5)]);
        assert!(!packer.filters.contains(&"TaintToleration".to_string()));
        assert_eq!(packer.filters.len(), FILTERS.len() - 1);
        assert_eq!(packer.fit_scoring, ScoringStrategy::default());
    }

    #[test]
    fn node_resources_fit_args_choose_the_scoring_strategy() {
        let cfg = parse(
            r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: packer
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - {name: cpu, weight: 2}
        - {name: memory, weight: 1}
- schedulerName: shaped
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: RequestedToCapacityRatio
        requestedToCapacityRatio:
          shape: [{utilization: 0, score: 10}, {utilization: 100, score: 0}]
"#,
        )
        .unwrap();
        assert_eq!(
            cfg.profiles[0].fit_scoring,
            ScoringStrategy {
                kind: ScoringType::MostAllocated,
                resources: vec![("cpu".into(), 2), ("memory".into(), 1)],
            }
        );
        assert_eq!(
            cfg.profiles[1].fit_scoring,
            ScoringStrategy {
                kind: ScoringType::RequestedToCapacityRatio(vec![(0, 10), (100, 0)]),
                resources: vec![("cpu".into(), 1), ("memory".into(), 1)],
            }
        );
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(parse("apiVersion: v1\nkind: Pod\n")
            .unwrap_err()
            .contains("KubeSchedulerConfiguration"));
        let unknown = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    score:\n      enabled: [{name: Magic}]\n";
        assert_eq!(
            parse(unknown).unwrap_err(),
            "profile \"default-scheduler\": plugin \"Magic\" does not exist"
        );
        let head = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- pluginConfig:\n";
        assert_eq!(
            parse(&format!("{head}  - name: NodeResourcesFit\n    args: {{scoringStrategy: {{type: Packed}}}}\n")).unwrap_err(),
            "profiles[0].pluginConfig[0].args.scoringStrategy.type: Unsupported value: \"Packed\": supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\""
        );
        assert!(parse(&format!(
            "{head}  - name: NodeResourcesFit\n    args: {{scoringStrategy: {{type: MostAllocated, resources: [{{name: cpu, weight: 0}}]}}}}\n"
        ))
        .unwrap_err()
        .ends_with("scoringStrategy.resources[0].weight: Invalid value: 0: resource weight of cpu not in valid range [1, 100]"));
        assert!(parse(&format!(
            "{head}  - name: NodeResourcesFit\n    args: {{scoringStrategy: {{type: RequestedToCapacityRatio, requestedToCapacityRatio: {{shape: [{{utilization: 50, score: 1}}, {{utilization: 20, score: 2}}]}}}}}}\n"
        ))
        .unwrap_err()
        .ends_with("shape[1].utilization: Invalid value: 20: utilization values must be sorted in increasing order"));
        assert!(parse(&format!(
            "{head}  - name: PodTopologySpread\n    args: {{defaultingType: System, defaultConstraints: [{{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}}]}}\n"
        ))
        .unwrap_err()
        .contains("when .defaultingType is \"System\", .defaultConstraints must be empty"));
        let list = parse(&format!(
            "{head}  - name: PodTopologySpread\n    args: {{defaultingType: List, defaultConstraints: [{{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}}]}}\n"
        ))
        .unwrap();
        match &list.profiles[0].spread_defaults {
            SpreadDefaults::List(l) => assert_eq!(
                (l.len(), l[0].max_skew, l[0].topology_key.as_str()),
                (1, 1, "zone")
            ),
            other => panic!("{other:?}"),
        }
        assert!(parse(&format!("{head}  - name: Magic\n"))
            .unwrap_err()
            .contains("plugin does not exist"));
        let dup = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: a\n- schedulerName: a\n";
        assert!(parse(dup).unwrap_err().contains("duplicate profile"));
    }
}
