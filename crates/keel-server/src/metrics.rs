//! The broker's counters in the Prometheus text exposition format (0.0.4).

use std::fmt::Write;

use keel_host::broker::BrokerMetrics;

/// The `Content-Type` of [`render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `metrics` as Prometheus text: one `# HELP`/`# TYPE` pair per family,
/// per-tenant families labelled `tenant` (a token's name, never a token).
pub fn render(metrics: &BrokerMetrics) -> String {
    let mut text = String::new();
    let gauges = [
        ("keel_runs_active", "Runs running now.", metrics.runs_active),
        (
            "keel_runs_queued",
            "Starts waiting for admission now.",
            metrics.runs_queued,
        ),
        (
            "keel_kernels_cached",
            "Kernels cached now.",
            metrics.kernels_cached,
        ),
    ];
    for (name, help, value) in gauges {
        family(&mut text, name, help, "gauge");
        let _ = writeln!(text, "{name} {value}");
    }
    let counters = [
        (
            "keel_runs_started_total",
            "Runs started.",
            metrics.runs_started,
        ),
        (
            "keel_runs_refused_total",
            "Starts refused (admission, quota, draining).",
            metrics.runs_refused,
        ),
        (
            "keel_events_sent_total",
            "run/event notifications sent to clients.",
            metrics.events_sent,
        ),
        (
            "keel_lagged_subscribers_total",
            "Subscriptions ended because their client did not keep up.",
            metrics.lagged_subscribers,
        ),
    ];
    for (name, help, value) in counters {
        family(&mut text, name, help, "counter");
        let _ = writeln!(text, "{name} {value}");
    }
    type Field = fn(&keel_host::broker::TenantUsage) -> u64;
    let tenants: [(&str, &str, &str, Field); 3] = [
        (
            "keel_tenant_runs_active",
            "A tenant's runs running now.",
            "gauge",
            |usage| usage.runs_active,
        ),
        (
            "keel_tenant_runs_started_total",
            "A tenant's runs started.",
            "counter",
            |usage| usage.runs_started,
        ),
        (
            "keel_tenant_runs_refused_total",
            "A tenant's starts refused.",
            "counter",
            |usage| usage.runs_refused,
        ),
    ];
    for (name, help, kind, field) in tenants {
        family(&mut text, name, help, kind);
        for (tenant, usage) in &metrics.tenants {
            let _ = writeln!(
                text,
                "{name}{{tenant=\"{}\"}} {}",
                label(tenant),
                field(usage)
            );
        }
    }
    text
}

fn family(text: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(text, "# HELP {name} {help}");
    let _ = writeln!(text, "# TYPE {name} {kind}");
}

/// A label value escaped as the format asks (`\\`, `\"`, `\n`).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_is_a_comment_or_a_sample() {
        let text = render(&BrokerMetrics::default());
        assert!(
            text.contains("# TYPE keel_runs_active gauge\nkeel_runs_active 0\n"),
            "{text}"
        );
        for line in text.lines() {
            let sample = line.split(' ').count() == 2 && line.starts_with("keel_");
            assert!(line.starts_with("# ") || sample, "{line}");
        }
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
