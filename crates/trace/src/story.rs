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

/// How far a component's lines are indented: the order in which the journey reaches them.
fn lane(component: &str) -> usize {
    match component {
        "apiserver" => 0,
        "controller-manager" => 1,
        "scheduler" => 2,
        "kubelet" => 3,
        _ => 4,
    }
}

/// Fields that say what a stage is about rather than what it decided: shown first, bare.
const HEADLINE: &[&str] = &["verb", "subresource", "object", "node"];

/// Fields the JSON has and the timeline leaves out (or shows its own way).
const QUIET: &[&str] = &["decision", "error", "audit_id", "code", "user"];

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

    /// The lines of `stages` (whole groups): a line per stage, except a run of admission
    /// plugins, told in one line (how many ran, which changed the object, which refused).
    pub fn lines(&self, stages: &[Stage]) -> Vec<String> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < stages.len() {
            let s = &stages[i];
            let run = stages[i..]
                .iter()
                .take_while(|t| t.stage == "admission" && t.depth == s.depth && t.component == s.component)
                .count();
            if run < 2 {
                out.push(self.line(s));
                i += 1;
                continue;
            }
            let plugins = &stages[i..i + run];
            let end = plugins
                .iter()
                .map(Stage::end_unix_nanos)
                .max()
                .unwrap_or(s.start_unix_nanos);
            let name = |p: &Stage| p.field("plugin").unwrap_or("?").to_owned();
            let changed: Vec<String> = plugins
                .iter()
                .filter(|p| p.field("decision").is_some())
                .map(name)
                .collect();
            let mut text = format!("admission: {run} plugins");
            if !changed.is_empty() {
                let _ = write!(text, "; {} changed the object", changed.join(", "));
            }
            for p in plugins.iter().filter(|p| p.field("error").is_some()) {
                let _ = write!(
                    text,
                    " FAILED: {} refused: {}",
                    name(p),
                    p.field("error").unwrap_or("")
                );
            }
            let indent = lane(&s.component) + s.depth as usize;
            out.push(self.row(s.start_unix_nanos, end - s.start_unix_nanos, indent, &text));
            i += run;
        }
        out
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
    fn a_run_of_admission_plugins_is_one_line() {
        let mut request = stage("request", "p", None, 0, 0);
        request.fields.insert("verb".into(), "create".into());
        request.fields.insert("user".into(), "admin".into());
        request.fields.insert("audit_id".into(), "a-1".into());
        let plugin = |name: &str, start: u64, decision: Option<&str>, error: Option<&str>| {
            let mut s = stage("admission", "p", None, start, 1);
            s.fields.insert("plugin".into(), name.into());
            if let Some(d) = decision {
                s.fields.insert("decision".into(), d.into());
            }
            if let Some(e) = error {
                s.fields.insert("error".into(), e.into());
            }
            s
        };
        let stages = [
            request,
            plugin("NamespaceLifecycle", 1_000_000, None, None),
            plugin("ServiceAccount", 2_000_000, Some("changed the object"), None),
            plugin("ResourceQuota", 3_000_000, None, Some("exceeded quota")),
            stage("store.create", "p", None, 5_000_000, 1),
        ];
        let lines = Timeline { origin: 0 }.lines(&stages);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(
            lines[0].ends_with("apiserver: request create by admin"),
            "{lines:#?}"
        );
        assert!(
            lines[1].ends_with(
                "  admission: 3 plugins; ServiceAccount changed the object FAILED: ResourceQuota refused: exceeded quota"
            ),
            "{lines:#?}"
        );
        assert!(lines[1].contains("3.0 ms"), "{lines:#?}");
        assert!(lines[2].ends_with("  store.create"), "{lines:#?}");
    }
}
