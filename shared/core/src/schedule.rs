//! A schedule definition (API.md, "Schedules and webhooks"): start a run of `agent` with `input`
//! at every time a cron expression matches in an IANA time zone, and after each such run ends,
//! optionally publish to a channel or write memory ([`OnComplete`], with `{{run.final_text}}`-style
//! [templates](render)). Versioned and content-addressed like every definition ([`crate::def`]).
//! This module holds the content, its validation, the compiled cron ([`CompiledSchedule`]) and the
//! pure planning of which times to fire after a tick or a downtime ([`CompiledSchedule::plan`]);
//! the service that stores fire state and starts runs lives elsewhere.
//!
//! # Cron expressions
//!
//! Five fields (`minute hour day-of-month month day-of-week`, minute precision) or six with a
//! leading seconds field (`second minute hour …`), parsed by the `croner` crate: lists, ranges,
//! `*/n` and `a-b/n` steps, `JAN`-`DEC` and `SUN`-`SAT`, `L`, `W`, `#` and the `@hourly`-style
//! nicknames. Day-of-week `0` and `7` are Sunday. When both day fields are restricted a time
//! matches either (POSIX); a leading `+` on day-of-week makes it both (`0 0 1 * +MON`). A year
//! field is refused. An expression that matches no time in the next five years is refused
//! (`0 0 30 2 *`).
//!
//! # Time zones and daylight saving time
//!
//! The expression is matched against the wall clock of `timezone` (default `UTC`), so
//! `0 9 * * *` in `Europe/Berlin` fires at 09:00 Berlin time in summer and in winter. Every fire
//! time is a real instant, handled in UTC. When the clock jumps, croner decides as follows
//! (pinned by the tests below, e.g. America/New_York on 2026-03-08 and 2026-11-01):
//!
//! - **Clock jumps forward (a gap, e.g. 02:00 → 03:00).** An expression with a single fixed
//!   second, minute and hour (`30 2 * * *`) whose time falls in the gap fires once, at the first
//!   instant after the gap (03:00 local), not at 03:30 and not twice. Any other expression (a
//!   wildcard, step, list or range in the second, minute or hour field: `*/15 * * * *`,
//!   `30 * * * *`, `0,30 2 * * *`) simply has no times inside the gap; it fires on its next
//!   time after it (for `*/15` 01:45 then 03:00: fifteen real minutes apart).
//! - **Clock goes back (a repeat, e.g. 01:00–02:00 twice).** A fixed-time expression
//!   (`30 1 * * *`) fires once, at the first 01:30, never at the second. Any other expression
//!   fires at its times in both passes, because they are different real instants: `*/15` fires
//!   every fifteen real minutes through the repeat (01:45 EDT, 01:00 EST, …) and `30 * * * *`
//!   fires at 01:30 EDT and again an hour later at 01:30 EST — never twice at one instant.
//!
//! # Missed fires and catch-up
//!
//! A fire time that is due when the scheduler looks (at most `grace` ago) is on time and always
//! fires. An older one was missed (the scheduler was down or paused): of the missed times of
//! one window only the most recent `catch_up_max` fire (`0` behaves as `1`: one fire stands for
//! the whole missed window), and the others are counted as skipped ([`Plan`]).
//!
//! # After the run
//!
//! `on_complete` actions run after a scheduled run ends, in order: `channel.publish` (the
//! rendered `message` is the payload, a JSON string) and `memory.set` (the rendered `value`,
//! stored as a JSON string, at `key` in `scope`). Templates may use `{{run.final_text}}`,
//! `{{run.id}}`, `{{run.status}}`, `{{schedule.name}}` and `{{fire.at}}` (the scheduled time,
//! RFC 3339 in UTC); `{{ run.id }}` with spaces is the same placeholder. Any other `{{…}}` is
//! refused when the schedule is put; substituted text is never expanded again.

use std::time::Duration;

use chrono::DateTime;
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::Error;
use crate::def::{DefContent, DefKind};

/// Bounds enforced by [`ScheduleContent::validate`].
pub mod limits {
    pub const DESCRIPTION_BYTES: usize = 4096;
    pub const CRON_BYTES: usize = 256;
    pub const TIMEZONE_BYTES: usize = 64;
    pub const INPUT_BYTES: usize = 64 * 1024;
    pub const METADATA_KEYS: usize = 32;
    /// `metadata` as compact JSON.
    pub const METADATA_BYTES: usize = 16 * 1024;
    pub const MAX_FIRES: u64 = 1_000_000_000;
    pub const CATCH_UP_MAX: u32 = 1000;
    pub const ON_COMPLETE: usize = 8;
    /// A template (`message`, `value`) before rendering.
    pub const TEMPLATE_BYTES: usize = 16 * 1024;
    /// A memory key, once rendered (the substrate's bound).
    pub const MEMORY_KEY_BYTES: usize = 512;
    /// `ttl_seconds`: ten years (the substrate's bound).
    pub const TTL_SECONDS: i64 = 10 * 365 * 24 * 3600;
    /// A channel name (the substrate's bound).
    pub const CHANNEL_BYTES: usize = 128;
    /// A schedule must fire within this many days of being put.
    pub const FIRST_FIRE_WITHIN_DAYS: i64 = 5 * 365 + 1;
    /// [`super::Plan::skipped`] is exact up to this many slots, a lower bound beyond.
    pub const SKIPPED_COUNT_CAP: u64 = 10_000;
}

/// What to do when a fire time comes while the run of the previous fire is still active.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// Start another run anyway.
    #[default]
    Allow,
    /// Skip this fire (it counts as skipped, not towards `max_fires`).
    Skip,
}

/// The memory scope a `memory.set` action writes to; the scope id follows from the schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryScope {
    /// The schedule's tenant.
    #[default]
    Tenant,
    /// The schedule's `agent` (the scope id is the agent name).
    Agent,
    /// The run that just ended (the scope id is its run id).
    Run,
    /// The subject the schedule's runs carry (the scope id is `schedule:<name>`).
    User,
}

impl MemoryScope {
    /// The wire name, as in the memory API (`tenant`, `agent`, `run`, `user`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tenant => "tenant",
            Self::Agent => "agent",
            Self::Run => "run",
            Self::User => "user",
        }
    }
}

/// One action taken after a scheduled run ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", tag = "action", deny_unknown_fields)]
pub enum OnComplete {
    /// Publish the rendered `message` (a template) to `channel` (a literal channel name).
    #[serde(rename = "channel.publish")]
    ChannelPublish { channel: String, message: String },
    /// Set `key` (a template without `{{run.final_text}}`) in `scope` to the rendered `value`
    /// (a template), expiring after `ttl_seconds` when given.
    #[serde(rename = "memory.set")]
    MemorySet {
        key: String,
        value: String,
        #[serde(default)]
        scope: MemoryScope,
        #[serde(default)]
        ttl_seconds: Option<i64>,
    },
}

// Read from a JSON object only, never from an array of its fields.
crate::objects_only!(OnComplete);

/// The content fields of a schedule definition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleContent {
    pub description: String,
    /// Required: five fields, or six with a leading seconds field (see the module docs).
    pub cron: String,
    /// An IANA time zone name (`Europe/Berlin`) the cron is read in.
    pub timezone: String,
    /// Required: the agent each fire runs.
    pub agent: String,
    /// Required: the run's input text.
    pub input: String,
    /// Attached to every run the schedule starts.
    pub metadata: serde_json::Map<String, Value>,
    /// A disabled schedule keeps its definition but does not fire.
    pub enabled: bool,
    /// Retire the schedule after this many cron fires (`run-now` does not count).
    pub max_fires: Option<u64>,
    /// How many missed fires one downtime may make up (see the module docs; 0 fires once).
    pub catch_up_max: u32,
    pub overlap: Overlap,
    pub on_complete: Vec<OnComplete>,
}

impl Default for ScheduleContent {
    fn default() -> Self {
        Self {
            description: String::new(),
            cron: String::new(),
            timezone: "UTC".to_owned(),
            agent: String::new(),
            input: String::new(),
            metadata: serde_json::Map::new(),
            enabled: true,
            max_fires: None,
            catch_up_max: 0,
            overlap: Overlap::default(),
            on_complete: Vec::new(),
        }
    }
}

fn bad(param: impl Into<String>, message: impl Into<String>) -> Error {
    Error::invalid(message).with_param(param)
}

/// croner's messages read "Component error: Number out of bounds."; ours are lowercase without
/// the period.
fn cron_reason(e: &croner::errors::CronError) -> String {
    e.to_string().trim_end_matches('.').to_lowercase()
}

const CRON_HINT: &str = "use 5 fields (minute hour day-of-month month day-of-week, e.g. `0 9 * * 1-5`) or 6 with a leading seconds field (`*/30 * * * * *`)";

/// Parses a 5- or 6-field cron expression (or an `@daily`-style nickname).
fn parse_cron(cron: &str) -> Result<Cron, Error> {
    if cron.trim().is_empty() {
        return Err(bad("cron", format!("`cron` is required; {CRON_HINT}")));
    }
    if cron.len() > limits::CRON_BYTES {
        return Err(bad(
            "cron",
            format!("`cron` is longer than {} bytes", limits::CRON_BYTES),
        ));
    }
    let fields = cron.split_whitespace().count();
    if !cron.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
        return Err(bad(
            "cron",
            format!("`cron` `{cron}` has {fields} fields; {CRON_HINT}"),
        ));
    }
    // An empty list element (`,`, `1,,2`, `5,`) is refused here: croner reads it as a field
    // that matches nothing, and finding that such a cron never fires walks every hour to the
    // year 5000 (seconds of CPU for one request; what the def_schedule fuzzer found).
    if let Some((i, f)) = cron
        .split_whitespace()
        .enumerate()
        .find(|(_, f)| f.split(',').any(str::is_empty))
    {
        return Err(bad(
            "cron",
            format!(
                "`cron` `{cron}`: field {} (`{f}`) has an empty list element; separate values with one comma, like `1,15`",
                i + 1
            ),
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(cron)
        .map_err(|e| {
            bad(
                "cron",
                format!(
                    "`cron` `{cron}` is not a valid cron expression ({}); {CRON_HINT}",
                    cron_reason(&e)
                ),
            )
        })
}

/// Parses an IANA time zone name.
fn parse_timezone(name: &str) -> Result<Tz, Error> {
    if name.len() <= limits::TIMEZONE_BYTES
        && let Ok(tz) = name.parse::<Tz>()
    {
        return Ok(tz);
    }
    let shown: String = name.chars().take(limits::TIMEZONE_BYTES).collect();
    Err(bad(
        "timezone",
        format!(
            "`timezone` `{}` is not an IANA time zone name; use one like `UTC`, `Europe/Berlin` or `America/New_York`",
            shown.escape_default()
        ),
    ))
}

impl ScheduleContent {
    /// The cron and time zone, ready to compute fire times. Fails (naming `cron` or `timezone`)
    /// on what [`ScheduleContent::validate`] would refuse about them, except that it does not
    /// check that the cron fires soon: stored content always compiles.
    pub fn compile(&self) -> Result<CompiledSchedule, Error> {
        Ok(CompiledSchedule {
            cron: parse_cron(&self.cron)?,
            tz: parse_timezone(&self.timezone)?,
        })
    }

    /// Checks what types cannot; the error names the field. A cron that matches no time in the
    /// next five years (from now) is refused.
    pub fn validate(&self) -> Result<(), Error> {
        self.validate_at(OffsetDateTime::now_utc())
    }

    fn validate_at(&self, now: OffsetDateTime) -> Result<(), Error> {
        if self.description.len() > limits::DESCRIPTION_BYTES {
            return Err(bad(
                "description",
                format!(
                    "`description` is {} bytes; at most {} are allowed",
                    self.description.len(),
                    limits::DESCRIPTION_BYTES
                ),
            ));
        }
        let compiled = self.compile()?;
        let horizon = now + time::Duration::days(limits::FIRST_FIRE_WITHIN_DAYS);
        if compiled.next_after(now).is_none_or(|t| t > horizon) {
            return Err(bad(
                "cron",
                format!(
                    "`cron` `{}` never fires (no time in the next 5 years matches it in {}); check the day-of-month, month and day-of-week fields",
                    self.cron, self.timezone
                ),
            ));
        }
        if !crate::agent::is_def_name(&self.agent) {
            return Err(bad(
                "agent",
                "`agent` is required: the name of the agent each fire runs (1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit)",
            ));
        }
        self.validate_run_fields()?;
        if let Some(n) = self.max_fires
            && !(1..=limits::MAX_FIRES).contains(&n)
        {
            return Err(bad(
                "max_fires",
                format!(
                    "`max_fires` must be between 1 and {}, got {n}; leave it out for a schedule that never retires",
                    limits::MAX_FIRES
                ),
            ));
        }
        if self.catch_up_max > limits::CATCH_UP_MAX {
            return Err(bad(
                "catch_up_max",
                format!(
                    "`catch_up_max` must be between 0 and {}, got {}",
                    limits::CATCH_UP_MAX,
                    self.catch_up_max
                ),
            ));
        }
        if self.on_complete.len() > limits::ON_COMPLETE {
            return Err(bad(
                "on_complete",
                format!(
                    "`on_complete` has {} actions; at most {}",
                    self.on_complete.len(),
                    limits::ON_COMPLETE
                ),
            ));
        }
        for (i, action) in self.on_complete.iter().enumerate() {
            action.validate(&format!("on_complete[{i}]"))?;
        }
        // A NUL anywhere (as for agents and skills; a definition from the config file does
        // not pass the gateway's check).
        crate::storable::refuse_nul(self)?;
        Ok(())
    }

    /// `input` and `metadata`: what each run is started with.
    fn validate_run_fields(&self) -> Result<(), Error> {
        if self.input.is_empty() {
            return Err(bad(
                "input",
                "`input` is required: the text each scheduled run starts with",
            ));
        }
        if self.input.len() > limits::INPUT_BYTES {
            return Err(bad(
                "input",
                format!(
                    "`input` is {} bytes; at most {} are allowed",
                    self.input.len(),
                    limits::INPUT_BYTES
                ),
            ));
        }
        if self.input.contains('\0') {
            return Err(crate::storable::nul_error("input"));
        }
        if self.metadata.len() > limits::METADATA_KEYS {
            return Err(bad(
                "metadata",
                format!(
                    "`metadata` has {} keys; at most {}",
                    self.metadata.len(),
                    limits::METADATA_KEYS
                ),
            ));
        }
        let metadata = Value::Object(self.metadata.clone());
        if let Some(path) = crate::storable::nul_path(&metadata) {
            // The path of a value inside the object starts with its key.
            return Err(crate::storable::nul_error(&format!("metadata.{path}")));
        }
        let bytes = metadata.to_string().len();
        if bytes > limits::METADATA_BYTES {
            return Err(bad(
                "metadata",
                format!(
                    "`metadata` is {bytes} bytes as JSON; at most {} are allowed",
                    limits::METADATA_BYTES
                ),
            ));
        }
        Ok(())
    }
}

impl OnComplete {
    /// Checks one action; `at` is its path (`on_complete[0]`).
    fn validate(&self, at: &str) -> Result<(), Error> {
        match self {
            Self::ChannelPublish { channel, message } => {
                validate_channel(&format!("{at}.channel"), channel)?;
                validate_template(&format!("{at}.message"), message, true)?;
            }
            Self::MemorySet {
                key,
                value,
                scope: _,
                ttl_seconds,
            } => {
                let field = format!("{at}.key");
                validate_template(&field, key, false)?;
                let longest = rendered_len_bound(key);
                if key.is_empty() || longest > limits::MEMORY_KEY_BYTES {
                    return Err(bad(
                        &field,
                        format!(
                            "`{field}` must be a memory key of 1-{} bytes once rendered (placeholders count at their longest: `{{{{schedule.name}}}}` 64, `{{{{run.id}}}}` 36, `{{{{fire.at}}}}` 20, `{{{{run.status}}}}` 14)",
                            limits::MEMORY_KEY_BYTES
                        ),
                    ));
                }
                validate_template(&format!("{at}.value"), value, true)?;
                if let Some(t) = *ttl_seconds
                    && !(1..=limits::TTL_SECONDS).contains(&t)
                {
                    let field = format!("{at}.ttl_seconds");
                    return Err(bad(
                        &field,
                        format!(
                            "`{field}` must be between 1 and {}, got {t}; leave it out for an entry that never expires",
                            limits::TTL_SECONDS
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A channel name as the substrate checks it (`channels::rules::validate_name`, which this
/// crate cannot call): 1-128 characters of `A-Z a-z 0-9 _ - .`, dots between non-empty
/// segments, not the route word `await`.
fn validate_channel(field: &str, name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= limits::CHANNEL_BYTES
        && name != "await"
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
        && name.split('.').all(|s| !s.is_empty());
    if ok {
        return Ok(());
    }
    let shown: String = name.chars().take(limits::CHANNEL_BYTES).collect();
    Err(bad(
        field,
        format!(
            "`{field}`: channel name `{}` is not valid; use 1-{} characters of A-Z, a-z, 0-9, '_', '-' and '.', with dots between non-empty segments (`reports.daily`), and not `await`",
            shown.escape_default(),
            limits::CHANNEL_BYTES
        ),
    ))
}

// ---------------------------------------------------------------------------------------------
// Templates

/// The placeholders a template may use.
pub const PLACEHOLDERS: [&str; 5] = [
    "run.final_text",
    "run.id",
    "run.status",
    "schedule.name",
    "fire.at",
];

/// The values substituted into `on_complete` templates.
#[derive(Clone, Copy, Debug)]
pub struct TemplateVars<'a> {
    /// The run's final assistant text (the caller bounds it; it is substituted as given).
    pub final_text: &'a str,
    pub run_id: &'a str,
    /// The run's terminal status (`succeeded`, `failed`, `cancelled`).
    pub run_status: &'a str,
    pub schedule_name: &'a str,
    /// The scheduled time of the fire (for `run-now`, when it was asked for).
    pub fire_at: OffsetDateTime,
}

impl TemplateVars<'_> {
    fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "run.final_text" => self.final_text.to_owned(),
            "run.id" => self.run_id.to_owned(),
            "run.status" => self.run_status.to_owned(),
            "schedule.name" => self.schedule_name.to_owned(),
            "fire.at" => format_fire_at(self.fire_at),
            _ => return None,
        })
    }
}

/// RFC 3339 in UTC, whole seconds: `2026-03-08T07:00:00Z`.
pub fn format_fire_at(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// One piece of a template.
enum Piece<'a> {
    Text(&'a str),
    /// A `{{…}}`: its trimmed name and its whole text.
    Placeholder {
        name: &'a str,
        raw: &'a str,
    },
    /// A `{{` with no `}}` after it, and the rest of the template.
    Unclosed(&'a str),
}

/// Splits a template into text and placeholders, left to right.
fn pieces(template: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            out.push(Piece::Text(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push(Piece::Unclosed(&rest[start..]));
            return out;
        };
        out.push(Piece::Placeholder {
            name: after[..end].trim(),
            raw: &rest[start..start + 2 + end + 2],
        });
        rest = &after[end + 2..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    out
}

/// Renders `template` in one pass: every known `{{placeholder}}` is replaced by its value, and
/// the substituted text is never scanned again (a final text holding `{{run.id}}` stays as it
/// is). Anything [`ScheduleContent::validate`] would refuse is copied through unchanged.
pub fn render(template: &str, vars: &TemplateVars<'_>) -> String {
    let mut out = String::with_capacity(template.len());
    for piece in pieces(template) {
        match piece {
            Piece::Text(t) | Piece::Unclosed(t) => out.push_str(t),
            Piece::Placeholder { name, raw } => match vars.get(name) {
                Some(v) => out.push_str(&v),
                None => out.push_str(raw),
            },
        }
    }
    out
}

/// Checks a template: bounded, no NUL, and every `{{…}}` a known placeholder
/// (`run.final_text` only where `final_text_ok`).
fn validate_template(field: &str, template: &str, final_text_ok: bool) -> Result<(), Error> {
    if template.len() > limits::TEMPLATE_BYTES {
        return Err(bad(
            field,
            format!(
                "`{field}` is {} bytes; at most {} are allowed",
                template.len(),
                limits::TEMPLATE_BYTES
            ),
        ));
    }
    if template.contains('\0') {
        return Err(crate::storable::nul_error(field));
    }
    let known = || {
        PLACEHOLDERS
            .iter()
            .filter(|p| final_text_ok || **p != "run.final_text")
            .map(|p| format!("{{{{{p}}}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for piece in pieces(template) {
        match piece {
            Piece::Text(_) => {}
            Piece::Unclosed(_) => {
                return Err(bad(
                    field,
                    format!("`{field}` has a `{{{{` without a closing `}}}}`"),
                ));
            }
            Piece::Placeholder { name, raw } => {
                if name == "run.final_text" && !final_text_ok {
                    return Err(bad(
                        field,
                        format!(
                            "`{field}` may not use `{{{{run.final_text}}}}` (its length has no bound); use {}",
                            known()
                        ),
                    ));
                }
                if !PLACEHOLDERS.contains(&name) {
                    let shown: String = raw.chars().take(80).collect();
                    return Err(bad(
                        field,
                        format!(
                            "`{field}` uses the unknown placeholder `{}`; use {}",
                            shown.escape_default(),
                            known()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The longest a template without `{{run.final_text}}` can be once rendered.
fn rendered_len_bound(template: &str) -> usize {
    pieces(template)
        .iter()
        .map(|p| match p {
            Piece::Text(t) | Piece::Unclosed(t) => t.len(),
            Piece::Placeholder { name, raw } => match *name {
                "run.id" => 36,
                "run.status" => 14,
                "schedule.name" => crate::agent::limits::NAME_CHARS,
                "fire.at" => 20,
                _ => raw.len(),
            },
        })
        .sum()
}

// ---------------------------------------------------------------------------------------------
// Fire times

/// A schedule's cron read in its time zone: computes fire times. Fire times are whole seconds.
#[derive(Clone, Debug)]
pub struct CompiledSchedule {
    cron: Cron,
    tz: Tz,
}

/// Which fire times to act on now ([`CompiledSchedule::plan`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The times to fire, oldest first (missed ones that are made up, then on-time ones).
    pub fires: Vec<OffsetDateTime>,
    /// Missed times that will not fire. Exact up to [`limits::SKIPPED_COUNT_CAP`]; a longer
    /// downtime reports that cap (a lower bound) rather than walking every missed time.
    pub skipped: u64,
    /// `Some` when more times were due than `limit` allowed: the first time not handled, to
    /// pass as `from` on the next tick. `None` when every time up to `now` was handled; the
    /// next tick's `from` is then [`CompiledSchedule::next_after`]`(now)`.
    pub next: Option<OffsetDateTime>,
}

const NANOS: i128 = 1_000_000_000;

/// Whole seconds at or below `ns` nanoseconds since the epoch.
fn floor_secs(ns: i128) -> i64 {
    clamp_i64(ns.div_euclid(NANOS))
}

/// Whole seconds at or above `ns` nanoseconds since the epoch.
fn ceil_secs(ns: i128) -> i64 {
    clamp_i64(-(-ns).div_euclid(NANOS))
}

fn clamp_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

fn utc(secs: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp(secs).ok()
}

impl CompiledSchedule {
    /// The time zone the cron is read in.
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    fn zoned(&self, secs: i64) -> Option<DateTime<Tz>> {
        DateTime::from_timestamp(secs, 0).map(|t| t.with_timezone(&self.tz))
    }

    /// The first fire time strictly after `secs`.
    fn next_secs(&self, secs: i64) -> Option<i64> {
        let t = self.zoned(secs)?;
        let next = self.cron.find_next_occurrence(&t, false).ok()?.timestamp();
        // croner only moves forward; the check keeps every loop over it finite regardless.
        (next > secs).then_some(next)
    }

    /// The last fire time strictly before `secs`.
    fn prev_secs(&self, secs: i64) -> Option<i64> {
        let t = self.zoned(secs)?;
        let prev = self
            .cron
            .find_previous_occurrence(&t, false)
            .ok()?
            .timestamp();
        (prev < secs).then_some(prev)
    }

    /// The first fire time strictly after `t` (any offset in, UTC out); `None` when the cron
    /// has no later time (croner searches up to the year 5000).
    pub fn next_after(&self, t: OffsetDateTime) -> Option<OffsetDateTime> {
        // Fire times are whole seconds, so "after t" is "after t's whole second".
        self.next_secs(floor_secs(t.unix_timestamp_nanos()))
            .and_then(utc)
    }

    /// Which fire times to act on now. The candidates are every fire time `s` with
    /// `from <= s <= now`. One with `now - s <= grace` is on time and always fires. Older ones
    /// were missed: only the most recent `max(catch_up_max, 1)` of them fire, and the rest are
    /// counted in [`Plan::skipped`]. At most `limit` fires are returned, oldest first; when
    /// more were due, [`Plan::next`] says where to continue. A time left for the next tick is
    /// judged again then, so by then it may count as missed.
    ///
    /// The cost is bounded by `catch_up_max + limit` cron steps (plus at most
    /// [`limits::SKIPPED_COUNT_CAP`] to count skipped times), however long the downtime.
    pub fn plan(
        &self,
        from: OffsetDateTime,
        now: OffsetDateTime,
        catch_up_max: u32,
        grace: Duration,
        limit: usize,
    ) -> Plan {
        let mut plan = Plan::default();
        let now_ns = now.unix_timestamp_nanos();
        let lo = ceil_secs(from.unix_timestamp_nanos());
        let hi = floor_secs(now_ns);
        if lo > hi {
            return plan;
        }
        let grace_ns = i128::try_from(grace.as_nanos()).unwrap_or(i128::MAX);
        // Missed: lo <= s < cut. On time: cut <= s <= hi.
        let cut = ceil_secs(now_ns.saturating_sub(grace_ns)).max(lo);

        // The most recent missed times, walked backwards from the cut (never the whole
        // downtime).
        let keep = usize::try_from(catch_up_max.max(1)).unwrap_or(usize::MAX);
        let mut missed = Vec::new();
        let mut cursor = cut;
        while missed.len() < keep {
            match self.prev_secs(cursor) {
                Some(s) if s >= lo => {
                    missed.push(s);
                    cursor = s;
                }
                _ => break,
            }
        }
        missed.reverse();
        if let Some(&oldest_kept) = missed.first() {
            plan.skipped = self.count_from(lo, oldest_kept);
        }

        let on_time = std::iter::successors(self.next_secs(cut.saturating_sub(1)), |&s| {
            self.next_secs(s)
        })
        .take_while(|&s| s <= hi);
        let mut due = missed.into_iter().chain(on_time);
        plan.fires = due.by_ref().take(limit).filter_map(utc).collect();
        plan.next = due.next().and_then(utc);
        plan
    }

    /// How many fire times `s` have `lo <= s < end`, counting at most
    /// [`limits::SKIPPED_COUNT_CAP`].
    fn count_from(&self, lo: i64, end: i64) -> u64 {
        let mut n = 0;
        let mut at = lo.saturating_sub(1);
        while n < limits::SKIPPED_COUNT_CAP {
            match self.next_secs(at) {
                Some(s) if s < end => {
                    n += 1;
                    at = s;
                }
                _ => break,
            }
        }
        n
    }
}

impl DefContent for ScheduleContent {
    const KIND: DefKind = DefKind::Schedule;

    fn from_json(value: Value) -> Result<Self, Error> {
        crate::def::from_json_fields("a schedule definition", value)
    }

    fn validate(&self) -> Result<(), Error> {
        ScheduleContent::validate(self)
    }

    fn description(&self) -> &str {
        &self.description
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;
    use time::macros::datetime;

    use super::*;

    fn content(v: Value) -> Result<ScheduleContent, Error> {
        let c = ScheduleContent::from_json(v)?;
        c.validate()?;
        Ok(c)
    }

    fn base() -> Value {
        json!({"cron": "0 9 * * 1-5", "agent": "reporter", "input": "write the daily report"})
    }

    fn with(extra: Value) -> Value {
        let mut v = base();
        if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        v
    }

    fn compiled(cron: &str, tz: &str) -> CompiledSchedule {
        ScheduleContent {
            cron: cron.into(),
            timezone: tz.into(),
            ..ScheduleContent::default()
        }
        .compile()
        .unwrap()
    }

    /// `n` fire times after `t`.
    fn times(c: &CompiledSchedule, mut t: OffsetDateTime, n: usize) -> Vec<OffsetDateTime> {
        (0..n)
            .map(|_| {
                t = c.next_after(t).unwrap();
                t
            })
            .collect()
    }

    #[test]
    fn an_empty_list_element_is_refused_at_once() {
        // What the def_schedule fuzzer found: `,` as the hour field took seconds to refuse.
        for cron in ["0 , * * 0-6", "0 1,,2 * * *", "5, * * * *", "0 0 * * ,1"] {
            let mut v = base();
            v["cron"] = json!(cron);
            let e = content(v).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("cron"), "{cron}");
            assert!(
                e.message.contains("empty list element"),
                "{cron}: {}",
                e.message
            );
        }
    }

    #[test]
    fn a_nul_in_the_description_is_refused() {
        let mut v = base();
        v["description"] = json!("a\u{0}b");
        let e = content(v).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("description"), "{}", e.message);
    }

    #[test]
    fn defaults_fill_omitted_fields() {
        let c = content(base()).unwrap();
        assert_eq!(c.timezone, "UTC");
        assert!(c.enabled);
        assert_eq!(c.catch_up_max, 0);
        assert_eq!(c.overlap, Overlap::Allow);
        assert_eq!(c.max_fires, None);
        let explicit = content(with(json!({
            "description": "", "timezone": "UTC", "metadata": {}, "enabled": true,
            "max_fires": null, "catch_up_max": 0, "overlap": "allow", "on_complete": []
        })))
        .unwrap();
        assert_eq!(c.hash(), explicit.hash());
        let e = content(with(json!({"overlap": "queue"}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("overlap"));
        let e = content(with(json!({"crons": "x"}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("crons"));
    }

    #[test]
    fn five_and_six_field_crons_are_accepted() {
        let c = compiled("30 9 * * *", "UTC");
        assert_eq!(
            c.next_after(datetime!(2026-01-01 10:00 UTC)),
            Some(datetime!(2026-01-02 09:30 UTC))
        );
        let c = compiled("*/20 * * * * *", "UTC");
        assert_eq!(
            times(&c, datetime!(2026-01-01 10:00:05 UTC), 3),
            [
                datetime!(2026-01-01 10:00:20 UTC),
                datetime!(2026-01-01 10:00:40 UTC),
                datetime!(2026-01-01 10:01:00 UTC)
            ]
        );
        // A nickname is a 5-field cron.
        let c = compiled("@daily", "UTC");
        assert_eq!(
            c.next_after(datetime!(2026-01-01 10:00 UTC)),
            Some(datetime!(2026-01-02 00:00 UTC))
        );
        content(with(json!({"cron": "0 0 9 * * MON-FRI"}))).unwrap();
    }

    #[test]
    fn next_after_is_strict_and_ignores_sub_seconds() {
        let c = compiled("* * * * * *", "UTC");
        let t = datetime!(2026-01-01 00:00:00 UTC);
        assert_eq!(c.next_after(t), Some(datetime!(2026-01-01 00:00:01 UTC)));
        assert_eq!(
            c.next_after(datetime!(2026-01-01 00:00:00.5 UTC)),
            Some(datetime!(2026-01-01 00:00:01 UTC))
        );
        // Any offset in, UTC out.
        let c = compiled("0 12 * * *", "Europe/Berlin");
        let next = c.next_after(datetime!(2026-07-01 00:00 +05:00)).unwrap();
        assert_eq!(next, datetime!(2026-07-01 10:00 UTC));
        assert_eq!(next.offset(), time::UtcOffset::UTC);
    }

    #[test]
    fn bad_crons_are_named_with_a_fix() {
        for (cron, needle) in [
            ("", "required"),
            ("* * * *", "has 4 fields"),
            ("0 0 0 1 1 * 2030", "has 7 fields"),
            (
                "61 * * * *",
                "not a valid cron expression (component error: number out of bounds)",
            ),
            ("0/5 * * * *", "not a valid cron expression"),
            ("@reboot", "not a valid cron expression"),
            ("* * * * mon-xyz", "not a valid cron expression"),
        ] {
            let e = content(with(json!({"cron": cron}))).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("cron"), "{cron}");
            assert!(e.message.contains(needle), "{cron}: {}", e.message);
            assert!(e.message.contains("5 fields"), "{cron}: {}", e.message);
            assert!(!e.message.ends_with('.'), "{}", e.message);
        }
    }

    #[test]
    fn bad_time_zones_are_named_with_an_example() {
        content(with(json!({"timezone": "America/New_York"}))).unwrap();
        for tz in ["Mars/Olympus", "", "utc+2", "Europe/Berlin "] {
            let e = content(with(json!({"timezone": tz}))).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("timezone"), "{tz}");
            assert!(e.message.contains("Europe/Berlin"), "{}", e.message);
        }
    }

    #[test]
    fn a_cron_that_never_fires_is_refused() {
        for cron in ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *"] {
            // It compiles (stored content always does) but does not validate.
            compiled(cron, "UTC");
            let started = Instant::now();
            let e = content(with(json!({"cron": cron}))).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("cron"));
            assert!(e.message.contains("never fires"), "{}", e.message);
            assert!(started.elapsed() < std::time::Duration::from_secs(2));
        }
        // Rare but real: 29 February.
        content(with(json!({"cron": "0 0 29 2 *"}))).unwrap();
        // The 29th of February on a Monday is next in 2044: too far.
        let c = ScheduleContent::from_json(with(json!({"cron": "0 0 29 2 +MON"}))).unwrap();
        let e = c.validate_at(datetime!(2026-01-01 00:00 UTC)).unwrap_err();
        assert!(e.message.contains("never fires"), "{}", e.message);
        c.validate_at(datetime!(2043-06-01 00:00 UTC)).unwrap();
    }

    #[test]
    fn fields_are_bounded_and_required() {
        let e = content(with(json!({"agent": ""}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("agent"));
        let e = content(with(json!({"agent": "Bad Name"}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("agent"));
        let e = content(with(json!({"input": ""}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input"));
        let e = content(with(json!({"input": "x".repeat(64 * 1024 + 1)}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input"));
        let e = content(with(json!({"input": "a\u{0}b"}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input"));
        let many: serde_json::Map<String, Value> =
            (0..33).map(|i| (format!("k{i}"), json!(i))).collect();
        let e = content(with(json!({"metadata": many}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("metadata"));
        let e = content(with(json!({"metadata": {"k": "x".repeat(16 * 1024)}}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("metadata"));
        let e = content(with(json!({"metadata": {"k": ["a\u{0}"]}}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("metadata.k[0]"));
        content(with(json!({"metadata": {"team": "ops", "n": 1}}))).unwrap();
        let e = content(with(json!({"max_fires": 0}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_fires"));
        content(with(json!({"max_fires": 3}))).unwrap();
        let e = content(with(json!({"catch_up_max": 1001}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("catch_up_max"));
        let action = json!({"action": "channel.publish", "channel": "c", "message": "m"});
        let e = content(with(json!({"on_complete": vec![action; 9]}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("on_complete"));
    }

    #[test]
    fn on_complete_actions_are_read_and_checked() {
        let c = content(with(json!({"on_complete": [
            {"action": "channel.publish", "channel": "reports.daily",
             "message": "{{schedule.name}} at {{fire.at}}: {{ run.final_text }}"},
            {"action": "memory.set", "key": "report/{{fire.at}}", "value": "{{run.final_text}}",
             "scope": "agent", "ttl_seconds": 86400},
            {"action": "memory.set", "key": "last", "value": "{{run.status}}"}
        ]})))
        .unwrap();
        assert_eq!(
            c.on_complete[2],
            OnComplete::MemorySet {
                key: "last".into(),
                value: "{{run.status}}".into(),
                scope: MemoryScope::Tenant,
                ttl_seconds: None
            }
        );
        let bad_one = |action: Value| content(with(json!({"on_complete": [action]}))).unwrap_err();
        let e = bad_one(
            json!({"action": "channel.publish", "channel": "c", "message": "{{run.output}}"}),
        );
        assert_eq!(e.param.as_deref(), Some("on_complete[0].message"));
        assert!(e.message.contains("`{{run.output}}`"), "{}", e.message);
        assert!(e.message.contains("{{run.final_text}}"), "{}", e.message);
        let e =
            bad_one(json!({"action": "channel.publish", "channel": "c", "message": "{{run.id"}));
        assert_eq!(e.param.as_deref(), Some("on_complete[0].message"));
        assert!(e.message.contains("closing"), "{}", e.message);
        let e =
            bad_one(json!({"action": "channel.publish", "channel": "bad name", "message": "m"}));
        assert_eq!(e.param.as_deref(), Some("on_complete[0].channel"));
        let e = bad_one(json!({"action": "channel.publish", "channel": "a..b", "message": "m"}));
        assert_eq!(e.param.as_deref(), Some("on_complete[0].channel"));
        let e = bad_one(
            json!({"action": "memory.set", "key": "k", "value": "x".repeat(16 * 1024 + 1)}),
        );
        assert_eq!(e.param.as_deref(), Some("on_complete[0].value"));
        let e = bad_one(json!({"action": "memory.set", "key": "{{run.final_text}}", "value": "v"}));
        assert_eq!(e.param.as_deref(), Some("on_complete[0].key"));
        assert!(e.message.contains("may not use"), "{}", e.message);
        let e = bad_one(json!({"action": "memory.set", "key": "", "value": "v"}));
        assert_eq!(e.param.as_deref(), Some("on_complete[0].key"));
        let e = bad_one(
            json!({"action": "memory.set", "key": "k".repeat(500) + "{{schedule.name}}", "value": "v"}),
        );
        assert_eq!(e.param.as_deref(), Some("on_complete[0].key"));
        let e =
            bad_one(json!({"action": "memory.set", "key": "k", "value": "v", "ttl_seconds": 0}));
        assert_eq!(e.param.as_deref(), Some("on_complete[0].ttl_seconds"));
        let e =
            bad_one(json!({"action": "memory.set", "key": "k", "value": "v", "scope": "global"}));
        assert!(
            e.param
                .as_deref()
                .unwrap_or_default()
                .starts_with("on_complete[0]"),
            "{e:?}"
        );
        let e = bad_one(json!({"action": "memory.set", "key": "k", "value": "v", "extra": 1}));
        assert!(
            e.param
                .as_deref()
                .unwrap_or_default()
                .starts_with("on_complete[0]"),
            "{e:?}"
        );
        let e = bad_one(json!({"action": "http.post", "url": "https://x/"}));
        assert!(
            e.param
                .as_deref()
                .unwrap_or_default()
                .starts_with("on_complete[0]"),
            "{e:?}"
        );
    }

    #[test]
    fn templates_render_in_one_pass() {
        let vars = TemplateVars {
            final_text: "done: {{run.id}} }}{{",
            run_id: "0190b6a0-0000-7000-8000-000000000000",
            run_status: "succeeded",
            schedule_name: "daily",
            fire_at: datetime!(2026-03-08 07:00:00.25 UTC),
        };
        assert_eq!(
            render(
                "[{{schedule.name}}] {{ fire.at }} {{run.status}}: {{run.final_text}}",
                &vars
            ),
            "[daily] 2026-03-08T07:00:00Z succeeded: done: {{run.id}} }}{{"
        );
        assert_eq!(render("{{run.id}}", &vars), vars.run_id);
        // What validation would refuse is copied through.
        assert_eq!(render("{{nope}} {{run.id", &vars), "{{nope}} {{run.id");
        assert_eq!(render("no placeholders", &vars), "no placeholders");
        assert_eq!(render("", &vars), "");
        // fire.at is always UTC.
        let local = TemplateVars {
            fire_at: datetime!(2026-03-08 03:00 -04:00),
            ..vars
        };
        assert_eq!(render("{{fire.at}}", &local), "2026-03-08T07:00:00Z");
    }

    // --- DST: America/New_York springs forward on 2026-03-08 (02:00 EST -> 03:00 EDT) and
    // falls back on 2026-11-01 (02:00 EDT -> 01:00 EST).

    #[test]
    fn a_fixed_time_in_the_spring_gap_fires_once_right_after_it() {
        let c = compiled("30 2 * * *", "America/New_York");
        assert_eq!(
            times(&c, datetime!(2026-03-07 12:00 UTC), 3),
            [
                datetime!(2026-03-08 07:00 UTC), // 03:00 EDT, the first instant after the gap
                datetime!(2026-03-09 06:30 UTC), // 02:30 EDT
                datetime!(2026-03-10 06:30 UTC),
            ]
        );
        // Walking backwards agrees.
        let noon = datetime!(2026-03-08 12:00 UTC).unix_timestamp();
        assert_eq!(
            c.prev_secs(noon).and_then(utc),
            Some(datetime!(2026-03-08 07:00 UTC))
        );
        // A list of times in the gap is not moved: those times do not exist that day.
        let c = compiled("0,30 2 * * *", "America/New_York");
        assert_eq!(
            c.next_after(datetime!(2026-03-07 12:00 UTC)),
            Some(datetime!(2026-03-09 06:00 UTC))
        );
    }

    #[test]
    fn a_fixed_time_in_the_autumn_repeat_fires_once() {
        let c = compiled("30 1 * * *", "America/New_York");
        assert_eq!(
            times(&c, datetime!(2026-10-31 12:00 UTC), 2),
            [
                datetime!(2026-11-01 05:30 UTC), // 01:30 EDT, the first pass
                datetime!(2026-11-02 06:30 UTC), // 01:30 EST the next day
            ]
        );
        // From inside the repeat (the second pass's 01:05 EST and the first pass's 01:35
        // EDT), the second 01:30 is not a fire time.
        for t in [
            datetime!(2026-11-01 06:05 UTC),
            datetime!(2026-11-01 05:35 UTC),
        ] {
            assert_eq!(
                c.next_after(t),
                Some(datetime!(2026-11-02 06:30 UTC)),
                "{t}"
            );
        }
        let plan = c.plan(
            datetime!(2026-11-01 04:00 UTC),
            datetime!(2026-11-01 08:00 UTC),
            1000,
            Duration::from_secs(60),
            100,
        );
        assert_eq!(plan.fires, [datetime!(2026-11-01 05:30 UTC)]);
    }

    #[test]
    fn interval_crons_follow_real_time_through_both_transitions() {
        let c = compiled("*/15 * * * *", "America/New_York");
        // Spring: 01:45 EST, then 03:00 EDT: fifteen real minutes.
        let spring = times(&c, datetime!(2026-03-08 06:30 UTC), 8);
        // Autumn: 01:00-01:45 EDT, then 01:00-01:45 EST.
        let autumn = times(&c, datetime!(2026-11-01 04:50 UTC), 16);
        for run in [spring, autumn] {
            for pair in run.windows(2) {
                assert_eq!(pair[1] - pair[0], time::Duration::minutes(15), "{pair:?}");
            }
        }
        // An hourly cron fires at both 01:30s: an hour of real time apart.
        let c = compiled("30 * * * *", "America/New_York");
        assert_eq!(
            times(&c, datetime!(2026-11-01 05:00 UTC), 3),
            [
                datetime!(2026-11-01 05:30 UTC),
                datetime!(2026-11-01 06:30 UTC),
                datetime!(2026-11-01 07:30 UTC)
            ]
        );
        // And skips the 02:30 that does not exist in spring.
        assert_eq!(
            times(&c, datetime!(2026-03-08 06:00 UTC), 2),
            [
                datetime!(2026-03-08 06:30 UTC),
                datetime!(2026-03-08 07:30 UTC)
            ]
        );
        // A plan over a whole transition day has no duplicate instants.
        let c = compiled("*/15 * * * *", "America/New_York");
        let plan = c.plan(
            datetime!(2026-11-01 00:00 UTC),
            datetime!(2026-11-02 00:00 UTC),
            1000,
            Duration::from_secs(86_400),
            1000,
        );
        // 24 real hours (of a 25-hour local day), both ends included: every quarter hour.
        assert_eq!(plan.fires.len(), 24 * 4 + 1);
        assert!(plan.fires.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn time_zones_move_wall_clock_crons() {
        let c = compiled("0 9 * * *", "Europe/Berlin");
        assert_eq!(
            c.next_after(datetime!(2026-01-15 00:00 UTC)),
            Some(datetime!(2026-01-15 08:00 UTC))
        );
        assert_eq!(
            c.next_after(datetime!(2026-07-15 00:00 UTC)),
            Some(datetime!(2026-07-15 07:00 UTC))
        );
    }

    // --- plan()

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn on_time_slots_fire() {
        let c = compiled("*/5 * * * *", "UTC");
        let now = datetime!(2026-01-01 10:00:30 UTC);
        // The previous tick handled everything up to 09:55; 10:00 is due.
        let plan = c.plan(datetime!(2026-01-01 09:55:01 UTC), now, 0, MINUTE, 10);
        assert_eq!(
            plan,
            Plan {
                fires: vec![datetime!(2026-01-01 10:00 UTC)],
                skipped: 0,
                next: None
            }
        );
        // `from` is inclusive; nothing due yet before it.
        let plan = c.plan(datetime!(2026-01-01 10:00 UTC), now, 0, MINUTE, 10);
        assert_eq!(plan.fires, [datetime!(2026-01-01 10:00 UTC)]);
        let plan = c.plan(datetime!(2026-01-01 10:00:00.1 UTC), now, 0, MINUTE, 10);
        assert_eq!(plan, Plan::default());
        // `now` is inclusive, to the second.
        let plan = c.plan(
            datetime!(2026-01-01 09:58 UTC),
            datetime!(2026-01-01 10:00:00.9 UTC),
            0,
            MINUTE,
            10,
        );
        assert_eq!(plan.fires, [datetime!(2026-01-01 10:00 UTC)]);
        // from after now: nothing.
        assert_eq!(
            c.plan(now, datetime!(2026-01-01 09:00 UTC), 0, MINUTE, 10),
            Plan::default()
        );
    }

    #[test]
    fn catch_up_zero_fires_the_most_recent_missed_slot_once() {
        let c = compiled("0 * * * *", "UTC");
        // Down from 02:00 to 10:00:30: 03:00..=09:00 were missed, 10:00 is on time.
        let plan = c.plan(
            datetime!(2026-01-01 02:00:01 UTC),
            datetime!(2026-01-01 10:00:30 UTC),
            0,
            MINUTE,
            10,
        );
        assert_eq!(
            plan.fires,
            [
                datetime!(2026-01-01 09:00 UTC),
                datetime!(2026-01-01 10:00 UTC)
            ]
        );
        assert_eq!(plan.skipped, 6);
        assert_eq!(plan.next, None);
        // With nothing on time, one fire for the whole window.
        let plan = c.plan(
            datetime!(2026-01-01 02:00:01 UTC),
            datetime!(2026-01-01 09:30 UTC),
            0,
            MINUTE,
            10,
        );
        assert_eq!(plan.fires, [datetime!(2026-01-01 09:00 UTC)]);
        assert_eq!(plan.skipped, 6);
    }

    #[test]
    fn catch_up_n_fires_the_n_most_recent_missed_slots() {
        let c = compiled("0 * * * *", "UTC");
        let from = datetime!(2026-01-01 02:00:01 UTC);
        let now = datetime!(2026-01-01 10:00:30 UTC);
        let plan = c.plan(from, now, 3, MINUTE, 10);
        assert_eq!(
            plan.fires,
            [
                datetime!(2026-01-01 07:00 UTC),
                datetime!(2026-01-01 08:00 UTC),
                datetime!(2026-01-01 09:00 UTC),
                datetime!(2026-01-01 10:00 UTC)
            ]
        );
        assert_eq!(plan.skipped, 4);
        // More allowed than missed: all of them, nothing skipped.
        let plan = c.plan(from, now, 100, MINUTE, 10);
        assert_eq!(plan.fires.len(), 8);
        assert_eq!(plan.fires[0], datetime!(2026-01-01 03:00 UTC));
        assert_eq!(plan.skipped, 0);
        // A wider grace makes older slots on time: they always fire.
        let plan = c.plan(from, now, 0, Duration::from_secs(3 * 3600), 10);
        assert_eq!(
            plan.fires,
            [
                datetime!(2026-01-01 07:00 UTC), // the one missed slot made up
                datetime!(2026-01-01 08:00 UTC),
                datetime!(2026-01-01 09:00 UTC),
                datetime!(2026-01-01 10:00 UTC)
            ]
        );
        assert_eq!(plan.skipped, 4);
    }

    #[test]
    fn a_limit_leaves_the_rest_for_the_next_tick() {
        let c = compiled("0 * * * *", "UTC");
        let from = datetime!(2026-01-01 02:00:01 UTC);
        let now = datetime!(2026-01-01 10:00:30 UTC);
        let first = c.plan(from, now, 5, MINUTE, 3);
        assert_eq!(
            first.fires,
            [
                datetime!(2026-01-01 05:00 UTC),
                datetime!(2026-01-01 06:00 UTC),
                datetime!(2026-01-01 07:00 UTC)
            ]
        );
        assert_eq!(first.skipped, 2);
        assert_eq!(first.next, Some(datetime!(2026-01-01 08:00 UTC)));
        // The next tick continues where this one stopped, skipping nothing more.
        let second = c.plan(first.next.unwrap(), now, 5, MINUTE, 3);
        assert_eq!(
            second.fires,
            [
                datetime!(2026-01-01 08:00 UTC),
                datetime!(2026-01-01 09:00 UTC),
                datetime!(2026-01-01 10:00 UTC)
            ]
        );
        assert_eq!((second.skipped, second.next), (0, None));
        // limit 0 fires nothing and points at the first due slot.
        let none = c.plan(from, now, 5, MINUTE, 0);
        assert!(none.fires.is_empty());
        assert_eq!(none.next, Some(datetime!(2026-01-01 05:00 UTC)));
    }

    #[test]
    fn a_year_of_downtime_at_one_second_stays_cheap() {
        let c = compiled("* * * * * *", "Europe/Berlin");
        let from = datetime!(2025-01-01 00:00 UTC);
        let now = datetime!(2026-01-01 00:00:00.5 UTC);
        let started = Instant::now();
        let plan = c.plan(from, now, limits::CATCH_UP_MAX, Duration::from_secs(5), 100);
        let zero = c.plan(from, now, 0, Duration::from_secs(5), 100);
        let elapsed = started.elapsed();
        // On time: 23:59:56..=00:00:00 (within 5 s of now). Made up: the 1000 seconds before,
        // 23:43:16..=23:59:55. 100 returned, oldest first.
        assert_eq!(plan.fires.len(), 100);
        assert_eq!(plan.fires[0], datetime!(2025-12-31 23:43:16 UTC));
        assert_eq!(plan.next, Some(datetime!(2025-12-31 23:44:56 UTC)));
        assert_eq!(plan.skipped, limits::SKIPPED_COUNT_CAP);
        assert_eq!(
            zero.fires,
            [
                datetime!(2025-12-31 23:59:55 UTC),
                datetime!(2025-12-31 23:59:56 UTC),
                datetime!(2025-12-31 23:59:57 UTC),
                datetime!(2025-12-31 23:59:58 UTC),
                datetime!(2025-12-31 23:59:59 UTC),
                datetime!(2026-01-01 00:00:00 UTC),
            ]
        );
        // Generous for a debug build on a busy machine; walking every slot would take seconds.
        assert!(elapsed < std::time::Duration::from_secs(2), "{elapsed:?}");
    }

    #[test]
    fn a_schedule_is_a_def_kind() {
        assert_eq!(ScheduleContent::KIND, DefKind::Schedule);
        let c = content(with(json!({"description": "daily report"}))).unwrap();
        assert_eq!(DefContent::description(&c), "daily report");
        let again = ScheduleContent::from_json_str(&c.canonical_json()).unwrap();
        assert_eq!(again, c);
    }
}

#[cfg(test)]
mod object_form_tests {
    use super::*;

    #[test]
    fn on_complete_actions_are_objects_never_arrays() {
        let ok: OnComplete = serde_json::from_value(serde_json::json!(
            {"action": "channel.publish", "channel": "reports", "message": "hi"}
        ))
        .unwrap();
        assert!(matches!(ok, OnComplete::ChannelPublish { .. }));
        let arr = serde_json::json!(["channel.publish", "reports", "hi"]);
        assert!(serde_json::from_value::<OnComplete>(arr).is_err());
    }
}
