//! The web page of a story (`/trace/<object path>` asked for as HTML): the timeline as a
//! waterfall, one swim lane per component, drawn on the server (no script), so that any
//! browser — or a headless one in a test — shows it as it is.

use std::fmt::Write;

use crate::Stage;

/// Each lane's colour (also what the browser test looks for in its screenshot).
pub const LANES: &[(&str, &str)] = &[
    ("apiserver", "#1f77b4"),
    ("controller-manager", "#ff7f0e"),
    ("scheduler", "#2ca02c"),
    ("kubelet", "#d62728"),
    ("proxy", "#8c564b"),
    ("dns", "#e377c2"),
];
const OTHER: &str = "#9467bd";

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page: `title` (the object), its stages (whole groups, as [`crate::story::join`] gives
/// them), and whether it reloads itself every two seconds (`--follow` in a browser).
pub fn html(title: &str, stages: &[Stage], follow: bool) -> String {
    let first = stages.iter().map(|s| s.start_unix_nanos).min().unwrap_or(0);
    let last = stages.iter().map(Stage::end_unix_nanos).max().unwrap_or(first);
    let total = (last - first).max(1) as f64;
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">{}<title>r8s trace: {}</title>\n<style>\n\
         body {{ font: 13px system-ui, sans-serif; margin: 16px; color: #222; }}\n\
         h1 {{ font-size: 18px; margin: 0 0 4px; }}\n\
         h2 {{ font-size: 14px; margin: 14px 0 4px; padding: 2px 6px; color: #fff; }}\n\
         .row {{ display: flex; align-items: center; height: 18px; }}\n\
         .label {{ width: 40%; overflow: hidden; white-space: nowrap; text-overflow: ellipsis; }}\n\
         .track {{ position: relative; flex: 1; height: 12px; background: #f2f2f2; }}\n\
         .bar {{ position: absolute; top: 0; height: 12px; min-width: 3px; }}\n\
         .dur {{ width: 80px; text-align: right; font-variant-numeric: tabular-nums; }}\n\
         .failed .label {{ color: #b00; font-weight: bold; }}\n\
         </style></head><body>\n",
        if follow {
            "<meta http-equiv=\"refresh\" content=\"2\">"
        } else {
            ""
        },
        escape(title),
    );
    let _ = writeln!(
        out,
        "<h1>{}</h1><p>{} stages in {:.1} ms</p>",
        escape(title),
        stages.len(),
        total / 1e6
    );
    let mut lanes: Vec<(&str, &str)> = LANES.to_vec();
    for s in stages {
        if !lanes.iter().any(|(c, _)| *c == s.component) {
            lanes.push((s.component.as_ref(), OTHER));
        }
    }
    for (lane, colour) in lanes {
        let rows: Vec<&Stage> = stages.iter().filter(|s| s.component == lane).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "<section class=\"lane\" data-lane=\"{lane}\"><h2 style=\"background: {colour}\">{lane}</h2>"
        );
        let mut i = 0;
        while i < rows.len() {
            let s = rows[i];
            i += 1;
            // A request's own stages (authentication, authorization, admission, the write)
            // are drawn inside its row, as segments of its bar: a request is one line.
            let mut inner = Vec::new();
            if lane == "apiserver" && s.depth == 0 {
                while i < rows.len() && rows[i].depth > 0 {
                    inner.push(rows[i]);
                    i += 1;
                }
            }
            let bar = |s: &Stage, shade: &str| {
                let left = (s.start_unix_nanos - first) as f64 / total * 100.0;
                let width = s.duration_nanos as f64 / total * 100.0;
                let detail: Vec<String> = std::iter::once(s.stage.to_string())
                    .chain(s.fields.iter().map(|(k, v)| format!("{k}={v}")))
                    .collect();
                format!(
                    "<div class=\"bar\" title=\"{}\" style=\"left: {left:.3}%; width: {width:.3}%; background: {shade}\"></div>",
                    escape(&detail.join("\n"))
                )
            };
            let mut label = format!("{}{}", "\u{a0}\u{a0}".repeat(s.depth as usize), s.stage);
            for key in ["verb", "subresource", "object", "phase"] {
                if let Some(v) = s.field(key) {
                    label.push(' ');
                    label.push_str(v);
                }
            }
            if let Some(d) = s.field("decision") {
                let _ = write!(label, ": {d}");
            }
            let failed = std::iter::once(s)
                .chain(inner.iter().copied())
                .find_map(|s| s.field("error"));
            if let Some(e) = failed {
                let _ = write!(label, " FAILED: {e}");
            }
            let mut bars = bar(s, colour);
            for part in &inner {
                // Darker segments over the request's bar.
                bars.push_str(&bar(part, "rgba(0, 0, 0, 0.35)"));
            }
            let _ = writeln!(
                out,
                "<div class=\"row{}\"><div class=\"label\">{}</div><div class=\"track\">{bars}</div><div class=\"dur\">{:.1} ms</div></div>",
                if failed.is_some() { " failed" } else { "" },
                escape(&label),
                s.duration_nanos as f64 / 1e6,
            );
        }
        out.push_str("</section>\n");
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(component: &'static str, name: &'static str, start: u64, duration: u64) -> Stage {
        Stage {
            component: component.into(),
            stage: name.into(),
            uid: "u".into(),
            owner: None,
            start_unix_nanos: start,
            duration_nanos: duration,
            depth: 0,
            fields: Default::default(),
        }
    }

    #[test]
    fn each_component_is_a_lane_and_each_stage_a_bar_where_it_ran() {
        let mut failed = stage("kubelet", "image", 500, 500);
        failed
            .fields
            .insert("error".into(), "ErrImagePull: <nope>".into());
        failed.depth = 1;
        let stages = [
            stage("apiserver", "request", 0, 250),
            stage("scheduler", "schedule", 250, 250),
            failed,
        ];
        let page = html("Pod default/web", &stages, false);
        assert!(page.contains("<title>r8s trace: Pod default/web</title>"));
        for lane in ["apiserver", "scheduler", "kubelet"] {
            assert!(page.contains(&format!("data-lane=\"{lane}\"")), "{page}");
        }
        assert!(!page.contains("data-lane=\"controller-manager\""));
        assert!(
            page.contains("left: 25.000%; width: 25.000%; background: #2ca02c"),
            "{page}"
        );
        assert!(page.contains("class=\"row failed\""), "{page}");
        assert!(page.contains("FAILED: ErrImagePull: &lt;nope&gt;"), "{page}");
        assert!(!page.contains("http-equiv"));
        // A request's own stages are segments of its row, not rows.
        let mut authn = stage("apiserver", "authn", 10, 10);
        authn.depth = 1;
        let page = html("x", &[stage("apiserver", "request", 0, 100), authn], false);
        assert_eq!(page.matches("class=\"row").count(), 1, "{page}");
        assert_eq!(page.matches("class=\"bar\"").count(), 2, "{page}");
        assert!(html("x", &stages, true).contains("http-equiv=\"refresh\""));
    }
}
