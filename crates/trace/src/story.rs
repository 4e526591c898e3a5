//! One object's story from the stages of any number of journals: the join by `uid` and
//! `owner`, and the timeline `r8s trace` prints.

use std::collections::HashSet;
use std::fmt::Write;

use crate::Stage;

/// The groups of `stages` (each an outermost stage with the stages under it, as a journal
/// keeps them, depth 0 beginning a group) that belong to `uid`'s story: about `uid`, or about
/// an object `uid` led to — whose `owner` is in the story, however many steps away (a
/// Deployment's ReplicaSet, its Pods). Groups in order of their start.
pub fn join<'a>(uid: &str, stages: impl IntoIterator<Item = &'a Stage>) -> Vec<Stage> {
    let mut groups: Vec<Vec<&Stage>> = Vec::new();
    for s in stages {
        match groups.last_mut() {
            Some(g) if s.depth > 0 => g.push(s),
            _ => groups.push(vec![s]),
        }
    }
    let mut story: HashSet<&str> = HashSet::from([uid]);
    loop {
        let before = story.len();
        for g in &groups {
            for s in g {
                if s.owner.as_deref().is_some_and(|o| story.contains(o)) {
                    story.insert(&s.uid);
                }
            }
        }
        if story.len() == before {
            break;
        }
    }
    let mut kept: Vec<&Vec<&Stage>> = groups
        .iter()
        .filter(|g| story.contains(g[0].uid.as_str()))
        .collect();
    kept.sort_by_key(|g| g[0].start_unix_nanos);
    kept.into_iter().flatten().map(|s| (*s).clone()).collect()
}

/// The groups of several sources (journals of different processes, which may overlap when
/// one process runs several components), each group once, in no particular order.
pub fn merge(sources: impl IntoIterator<Item = Vec<Stage>>) -> Vec<Stage> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for source in sources {
        let mut keep = false;
        for s in source {
            if s.depth == 0 {
                keep = seen.insert((
                    s.component.clone(),
                    s.stage.clone(),
                    s.uid.clone(),
                    s.start_unix_nanos,
                ));
            }
            if keep {
                out.push(s);
            }
        }
    }
    out
}

/// How far a component's lines are indented: the order in which the journey reaches them.
fn lane(component: &str) -> usize {
    match component {
        "apiserver" => 0,
        "controller-manager" => 1,
        "scheduler" => 2,
        "kubelet" => 3,
        "proxy" | "dns" => 4,
        _ => 5,
    }
}

/// Fields that say what a stage is about rather than what it decided: shown first, bare.
const HEADLINE: &[&str] = &["verb", "subresource", "object", "phase", "node"];

/// Fields the JSON has and the timeline leaves out (or shows its own way).
const QUIET: &[&str] = &["decision", "error", "audit_id", "code", "user", "plugins"];

fn describe(s: &Stage) -> String {
    let mut out = String::new();
    for key in HEADLINE {
        if let Some(v) = s.field(key) {
            out.push(' ');
            out.push_str(v);
        }
    }
    if let Some(user) = s.field("user").filter(|_| s.depth == 0) {
        let _ = write!(out, " by {user}");
    }
    if let Some(code) = s.field("code").filter(|c| !c.starts_with('2')) {
        let _ = write!(out, " -> {code}");
    }
    if let Some(d) = s.field("decision") {
        let _ = write!(out, ": {d}");
    }
    for (k, v) in &s.fields {
        if HEADLINE.contains(&k.as_ref()) || QUIET.contains(&k.as_ref()) {
            continue;
        }
        let _ = write!(out, " {k}={v}");
    }
    if let Some(e) = s.field("error") {
        let _ = write!(out, " FAILED: {e}");
    }
    out
}

fn millis(nanos: u64) -> String {
    let ms = nanos as f64 / 1e6;
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        format!("{ms:.1} ms")
    }
}

/// The timeline's lines, their start counted from `origin` (Unix nanoseconds).
pub struct Timeline {
    pub origin: u64,
}

impl Timeline {
    pub fn header() -> String {
        format!("{:>10}  {:>10}  STAGE", "START", "DURATION")
    }

    fn row(&self, start: u64, duration: u64, indent: usize, text: &str) -> String {
        let offset = start as f64 - self.origin as f64;
        format!(
            "{:>10}  {:>10}  {}{text}",
            format!("{:+.3} s", offset / 1e9),
            millis(duration),
            "  ".repeat(indent),
        )
    }

    /// One stage: its start from the origin, its duration, indented by component and by
    /// nesting, with what it did.
    pub fn line(&self, s: &Stage) -> String {
        let name = if s.depth == 0 {
            format!("{}: {}", s.component, s.stage)
        } else {
            s.stage.to_string()
        };
        let indent = lane(&s.component) + s.depth as usize;
        self.row(
            s.start_unix_nanos,
            s.duration_nanos,
            indent,
            &format!("{name}{}", describe(s)),
        )
    }

    /// The lines of `stages`.
    pub fn lines(&self, stages: &[Stage]) -> Vec<String> {
        stages.iter().map(|s| self.line(s)).collect()
    }
}

/// The whole timeline: a header, the lines of the stages, and the time from the first start
/// to the last end.
pub fn render(stages: &[Stage]) -> String {
    let mut out = String::new();
    let Some(first) = stages.iter().map(|s| s.start_unix_nanos).min() else {
        return out;
    };
    let last = stages.iter().map(Stage::end_unix_nanos).max().unwrap_or(first);
    let timeline = Timeline { origin: first };
    let _ = writeln!(out, "{}", Timeline::header());
    for line in timeline.lines(stages) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "{} stages in {}", stages.len(), millis(last - first));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(stage: &'static str, uid: &str, owner: Option<&str>, start: u64, depth: u8) -> Stage {
        Stage {
            component: "apiserver".into(),
            stage: stage.into(),
            uid: uid.into(),
            owner: owner.map(str::to_owned),
            start_unix_nanos: start,
            duration_nanos: 1_000_000,
            depth,
            fields: Default::default(),
        }
    }

    #[test]
    fn the_story_follows_owners_however_deep_and_keeps_groups_whole() {
        let stages = [
            stage("request", "pod", Some("rs"), 30, 0),
            stage("authn", "pod", None, 31, 1),
            stage("request", "deploy", None, 10, 0),
            stage("admission", "deploy", None, 11, 1),
            stage("request", "other", None, 15, 0),
            stage("replicaset.sync", "rs", Some("deploy"), 20, 0),
            stage("schedule", "pod", None, 40, 0),
        ];
        let story = join("deploy", &stages);
        let order: Vec<(&str, &str)> = story.iter().map(|s| (s.stage.as_ref(), s.uid.as_str())).collect();
        assert_eq!(
            order,
            [
                ("request", "deploy"),
                ("admission", "deploy"),
                ("replicaset.sync", "rs"),
                ("request", "pod"),
                ("authn", "pod"),
                ("schedule", "pod"),
            ]
        );
        // A pod's story does not climb to its owners.
        assert_eq!(join("pod", &stages).len(), 3);
    }

    #[test]
    fn merged_sources_keep_each_group_once() {
        let a = vec![stage("request", "p", None, 1, 0), stage("authn", "p", None, 2, 1)];
        let b = vec![
            stage("request", "p", None, 1, 0),
            stage("authn", "p", None, 2, 1),
            stage("kubelet.sync_pod", "p", None, 5, 0),
            stage("cri.run_pod_sandbox", "p", None, 6, 1),
        ];
        let merged = merge([a, b]);
        let names: Vec<&str> = merged.iter().map(|s| s.stage.as_ref()).collect();
        assert_eq!(
            names,
            ["request", "authn", "kubelet.sync_pod", "cri.run_pod_sandbox"]
        );
    }

    #[test]
    fn the_timeline_shows_offsets_durations_and_decisions() {
        let mut s = stage("deployment.sync", "d", None, 1_000_000_000, 0);
        s.component = "controller-manager".into();
        s.fields
            .insert("decision".into(), "created ReplicaSet web-1".into());
        let mut e = stage("image.pull", "d", None, 1_500_000_000, 1);
        e.fields.insert("error".into(), "not found".into());
        let text = render(&[s, e]);
        assert!(text.contains("+0.000 s"), "{text}");
        assert!(
            text.contains("  controller-manager: deployment.sync: created ReplicaSet web-1"),
            "{text}"
        );
        assert!(text.contains("+0.500 s"), "{text}");
        assert!(text.contains("image.pull FAILED: not found"), "{text}");
        assert!(text.contains("2 stages in 501.0 ms"), "{text}");
    }

    #[test]
    fn requests_name_their_user_and_admission_its_phase() {
        let mut request = stage("request", "p", None, 0, 0);
        request.fields.insert("verb".into(), "create".into());
        request.fields.insert("user".into(), "admin".into());
        request.fields.insert("audit_id".into(), "a-1".into());
        request.fields.insert("code".into(), "201".into());
        let mut admission = stage("admission", "p", None, 1_000_000, 1);
        admission.fields.insert("phase".into(), "mutating".into());
        admission
            .fields
            .insert("plugins".into(), "ServiceAccount 12µs, Priority 3µs".into());
        admission
            .fields
            .insert("decision".into(), "ServiceAccount changed the object".into());
        let mut refused = stage("request", "q", None, 2_000_000, 0);
        refused.fields.insert("code".into(), "403".into());
        let lines = Timeline { origin: 0 }.lines(&[request, admission, refused]);
        assert!(
            lines[0].ends_with("apiserver: request create by admin"),
            "{lines:#?}"
        );
        assert!(
            lines[1].ends_with("  admission mutating: ServiceAccount changed the object"),
            "{lines:#?}"
        );
        assert!(lines[2].ends_with("apiserver: request -> 403"), "{lines:#?}");
    }
}
