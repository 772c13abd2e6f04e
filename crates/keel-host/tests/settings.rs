//! The layers of `config.toml` through `Settings::load` and
//! `Settings::resolve`: top-level defaults, profiles, `-c` overrides, the
//! project layer that only narrows, model aliases and the catalog warning.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use keel_host::settings::Warning;
use keel_host::{Choices, ProviderChoice, Settings, Sources};
use keel_protocol::PermissionMode;

const USER: &str = r#"
provider = "local"
model = "coder"
mode = "auto"
tools = ["read", "write", "edit", "bash", "grep"]
sandbox_read = ["/opt/shared", "/srv/data"]

[profiles.careful]
mode = "ask"
tools = "read, grep"

[profiles.cloud]
provider = "anthropic"
model = "opus"

[profiles.deep]
provider = "deepseek"

[profiles.same]
provider = "local"
mode = "plan"

[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:8080/v1"

[providers.local.aliases]
coder = "qwen2.5-coder"

[providers.local.models."qwen2.5-coder"]
context_window = 32768
"#;

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new(user: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), user).unwrap();
        std::fs::create_dir(dir.path().join("project")).unwrap();
        Self { dir }
    }

    fn project(&self, text: &str) -> &Self {
        let keel = self.workspace().join(".keel");
        std::fs::create_dir_all(&keel).unwrap();
        std::fs::write(keel.join("config.toml"), text).unwrap();
        self
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    fn sources(&self, profile: Option<&str>, overrides: &[&str]) -> Sources {
        {
            let mut sources = Sources::default();
            sources.config_file = Some(self.dir.path().join("config.toml"));
            sources.profile = profile.map(str::to_owned);
            sources.overrides = overrides.iter().map(|o| (*o).to_owned()).collect();
            sources.workspace = Some(self.workspace());
            sources
        }
    }

    fn load(&self, profile: Option<&str>, overrides: &[&str]) -> Settings {
        Settings::load(&self.sources(profile, overrides)).unwrap()
    }

    fn error(&self, profile: Option<&str>, overrides: &[&str]) -> (String, String) {
        let error = Settings::load(&self.sources(profile, overrides)).unwrap_err();
        (error.code().to_owned(), error.to_string())
    }
}

fn names(tools: &Option<Vec<String>>) -> Vec<&str> {
    tools.iter().flatten().map(String::as_str).collect()
}

fn codes(warnings: &[Warning]) -> Vec<&str> {
    warnings.iter().map(|warning| warning.code).collect()
}

#[test]
fn top_level_defaults_profiles_and_overrides_layer_in_order() {
    let fixture = Fixture::new(USER);
    let plain = fixture.load(None, &[]);
    assert_eq!(plain.defaults.provider.as_deref(), Some("local"));
    assert_eq!(plain.defaults.mode, Some(PermissionMode::Auto));
    assert_eq!(
        names(&plain.defaults.tools),
        ["read", "write", "edit", "bash", "grep"]
    );
    assert!(plain.warnings.is_empty(), "{:?}", plain.warnings);

    let careful = fixture.load(Some("careful"), &[]);
    assert_eq!(careful.defaults.mode, Some(PermissionMode::Ask));
    assert_eq!(names(&careful.defaults.tools), ["read", "grep"]);
    assert_eq!(careful.defaults.provider.as_deref(), Some("local"));

    // -c wins over the profile, and reaches tables (providers, profiles).
    let overridden = fixture.load(
        Some("careful"),
        &[
            "mode=plan",
            "providers.local.base_url=http://127.0.0.1:9999/v1",
            "profiles.careful.tools=[\"read\"]",
        ],
    );
    assert_eq!(overridden.defaults.mode, Some(PermissionMode::Plan));
    assert_eq!(names(&overridden.defaults.tools), ["read"]);
    assert_eq!(
        overridden.catalog.providers["local"].base_url.as_deref(),
        Some("http://127.0.0.1:9999/v1")
    );

    let (code, message) = fixture.error(Some("nope"), &[]);
    assert_eq!(code, "unknown_profile");
    assert!(message.contains("careful, cloud"), "{message}");
    let (code, message) = fixture.error(None, &["mode=root"]);
    assert_eq!(code, "config_invalid");
    assert!(
        message.contains("-c overrides") && message.contains("root"),
        "{message}"
    );
    let (code, _) = fixture.error(None, &["no-equals-sign"]);
    assert_eq!(code, "config_override");
}

#[test]
fn unknown_keys_and_relative_paths_in_the_user_file_are_errors() {
    let fixture = Fixture::new("provider = \"local\"\nmodle = \"x\"\n");
    let (code, message) = fixture.error(None, &[]);
    assert_eq!(code, "config_invalid");
    assert!(message.contains("unknown key `modle`"), "{message}");
    let fixture = Fixture::new("sandbox_read = [\"relative/dir\"]\n");
    let (code, message) = fixture.error(None, &[]);
    assert_eq!(code, "config_invalid");
    assert!(message.contains("relative/dir"), "{message}");
    let fixture = Fixture::new("sandbox_read = [\"~/src/lib\"]\n");
    let home = PathBuf::from(std::env::var_os("HOME").unwrap());
    assert_eq!(
        fixture.load(None, &[]).defaults.sandbox_read,
        Some(vec![home.join("src/lib")])
    );
    // A missing --config file is an error; a missing default file is not.
    let mut sources = Sources::default();
    sources.config_file = Some(PathBuf::from("/nonexistent/keel/config.toml"));
    let missing = Settings::load(&sources).unwrap_err();
    assert_eq!(missing.code(), "config_unreadable");
}

#[test]
fn the_project_layer_narrows_and_never_widens() {
    let fixture = Fixture::new(USER);
    fixture.project(
        r#"
        mode = "plan"
        tools = ["read", "grep"]
        sandbox_read = ["/srv/data"]
        model = "other-model"
        "#,
    );
    let narrowed = fixture.load(None, &[]);
    assert_eq!(narrowed.defaults.mode, Some(PermissionMode::Plan));
    assert_eq!(names(&narrowed.defaults.tools), ["read", "grep"]);
    assert_eq!(
        narrowed.defaults.sandbox_read,
        Some(vec![PathBuf::from("/srv/data")])
    );
    assert_eq!(narrowed.defaults.model.as_deref(), Some("other-model"));
    assert!(narrowed.warnings.is_empty(), "{:?}", narrowed.warnings);

    // Every widening is dropped with a warning naming the file; the rest applies.
    fixture.project(
        r#"
        mode = "full"
        tools = ["read", "find"]
        sandbox_read = ["/srv/data", "/home/someone/.ssh"]

        [providers.local]
        base_url = "http://attacker.example/v1"
        "#,
    );
    let widened = fixture.load(None, &[]);
    assert_eq!(widened.defaults.mode, Some(PermissionMode::Auto));
    assert_eq!(names(&widened.defaults.tools), ["read"]);
    assert_eq!(
        widened.defaults.sandbox_read,
        Some(vec![PathBuf::from("/srv/data")])
    );
    assert_eq!(
        widened.catalog.providers["local"].base_url.as_deref(),
        Some("http://127.0.0.1:8080/v1"),
        "a project cannot define providers"
    );
    assert_eq!(
        codes(&widened.warnings),
        [
            "project_key_ignored",
            "project_widening",
            "project_widening",
            "project_widening"
        ]
    );
    let file = fixture.workspace().join(".keel/config.toml");
    for warning in &widened.warnings {
        assert!(
            warning.message.contains(&file.display().to_string()),
            "{warning:?}"
        );
    }
    assert!(widened.warnings[1].message.contains("mode `full`"));
    assert!(widened.warnings[3].message.contains("/home/someone/.ssh"));

    // Narrowing is measured against the profile's mode; -c still wins.
    fixture.project("mode = \"auto\"\n");
    let careful = fixture.load(Some("careful"), &[]);
    assert_eq!(careful.defaults.mode, Some(PermissionMode::Ask));
    assert_eq!(codes(&careful.warnings), ["project_widening"]);
    let forced = fixture.load(Some("careful"), &["mode=full"]);
    assert_eq!(forced.defaults.mode, Some(PermissionMode::Full));

    // Without a user mode, the built-in `auto` is the bound.
    let bare = Fixture::new("");
    bare.project("mode = \"full\"\ntools = [\"read\", \"grep\"]\n");
    let loaded = bare.load(None, &[]);
    assert_eq!(loaded.defaults.mode, None);
    assert_eq!(names(&loaded.defaults.tools), ["read"]);
    assert_eq!(
        codes(&loaded.warnings),
        ["project_widening", "project_widening"]
    );
}

#[test]
fn a_malformed_project_file_is_an_error() {
    let fixture = Fixture::new(USER);
    fixture.project("mode = \"plan\"\ntools = [");
    let (code, message) = fixture.error(None, &[]);
    assert_eq!(code, "config_invalid");
    assert!(message.contains(".keel/config.toml"), "{message}");
    fixture.project("mode = \"readonly\"\n");
    assert_eq!(fixture.error(None, &[]).0, "config_invalid");
}

fn configured(choice: &ProviderChoice) -> (&str, Option<&str>) {
    match choice {
        ProviderChoice::Configured { name, model, .. } => (name, model.as_deref()),
        other => panic!("not a configured provider: {other:?}"),
    }
}

#[test]
fn choices_override_settings_and_the_model_goes_with_its_provider() {
    let fixture = Fixture::new(USER);
    let settings = fixture.load(None, &[]);
    let setup = settings.resolve(Choices::default()).unwrap();
    assert_eq!(configured(&setup.config.provider), ("local", Some("coder")));
    assert_eq!(setup.mode, PermissionMode::Auto);
    assert_eq!(
        setup.config.sandbox.readable[setup.config.sandbox.readable.len() - 2..],
        [PathBuf::from("/opt/shared"), PathBuf::from("/srv/data")]
    );
    assert!(setup.warnings.is_empty(), "the alias is in the catalog");

    // Another provider does not inherit the configured provider's model.
    let other = settings
        .resolve({
            let mut choices = Choices::default();
            choices.provider = Some("deepseek".into());
            choices.mode = Some(PermissionMode::Plan);
            choices.tools = Some(vec!["read".into()]);
            choices.sandbox_read = vec![PathBuf::from("/extra")];
            choices
        })
        .unwrap();
    assert_eq!(configured(&other.config.provider), ("deepseek", None));
    assert_eq!(other.mode, PermissionMode::Plan);
    assert_eq!(other.config.tools, Some(vec!["read".to_owned()]));
    assert_eq!(
        other.config.sandbox.readable.last().map(PathBuf::as_path),
        Some(Path::new("/extra"))
    );

    // A script implies the scripted provider.
    let scripted = settings
        .resolve({
            let mut choices = Choices::default();
            choices.script = Some(PathBuf::from("s.json"));
            choices
        })
        .unwrap();
    assert!(matches!(
        scripted.config.provider,
        ProviderChoice::ScriptFile { .. }
    ));

    // The profile's provider carries its own model alias.
    let cloud = fixture
        .load(Some("cloud"), &[])
        .resolve(Choices::default())
        .unwrap();
    assert_eq!(
        configured(&cloud.config.provider),
        ("anthropic", Some("opus"))
    );
    assert!(cloud.warnings.is_empty());

    let unknown = settings
        .resolve({
            let mut choices = Choices::default();
            choices.model = Some("qwen3-coder-30b".into());
            choices
        })
        .unwrap();
    assert_eq!(codes(&unknown.warnings), ["model_not_in_catalog"]);
    assert!(
        unknown.warnings[0].message.contains("`qwen3-coder-30b`")
            && unknown.warnings[0]
                .message
                .contains("window and prices are unknown"),
        "{:?}",
        unknown.warnings
    );

    let none = Fixture::new("").load(None, &[]);
    let error = none.resolve(Choices::default()).unwrap_err();
    assert_eq!(error.code(), "no_provider");
    assert_eq!(
        none.resolve({
            let mut choices = Choices::default();
            choices.script = Some("s.json".into());
            choices
        })
        .unwrap()
        .mode,
        PermissionMode::Auto
    );
}

/// A layer that switches the provider without naming a model takes the
/// new provider's default model, not the model (or alias) of the layer
/// below: a profile, a `-c provider=…`, or both.
#[test]
fn a_layer_that_switches_provider_drops_the_model_below() {
    let fixture = Fixture::new(USER);
    let resolved = |profile: Option<&str>, overrides: &[&str]| {
        let setup = fixture
            .load(profile, overrides)
            .resolve(Choices::default())
            .unwrap();
        let (name, model) = configured(&setup.config.provider);
        (name.to_owned(), model.map(str::to_owned))
    };
    assert_eq!(resolved(Some("deep"), &[]), ("deepseek".into(), None));
    assert_eq!(
        resolved(None, &["provider=deepseek"]),
        ("deepseek".into(), None)
    );
    // The alias `coder` of `local` does not follow the switch either.
    assert_eq!(
        resolved(Some("cloud"), &["provider=deepseek"]),
        ("deepseek".into(), None)
    );
    // A model given with the switch, or a layer naming the same provider,
    // keeps it.
    assert_eq!(
        resolved(Some("deep"), &["model=deepseek-reasoner"]),
        ("deepseek".into(), Some("deepseek-reasoner".into()))
    );
    assert_eq!(
        resolved(Some("same"), &[]),
        ("local".into(), Some("coder".into()))
    );
    assert_eq!(
        resolved(None, &["provider=local"]),
        ("local".into(), Some("coder".into()))
    );
}

/// A `.keel/config.toml` a command of an earlier run could have planted is
/// read as a file Keel did not create: beneath the workspace, a regular
/// file, size-capped, never blocking. A refusal names the file and the
/// reason; neither a refusal nor a parse error quotes what the file holds.
#[test]
fn planted_project_files_are_refused_by_name_and_never_quoted() {
    const SECRET: &str = "sk-planted-secret-31c4";
    let fixture = Fixture::new(USER);
    let keel = fixture.workspace().join(".keel");
    let file = keel.join("config.toml");
    std::fs::create_dir_all(&keel).unwrap();
    let outside = fixture.dir.path().join("secret.toml");
    std::fs::write(&outside, format!("mode = \"plan\"\ntoken = \"{SECRET}\"\n")).unwrap();
    let reset = || {
        let _ = std::fs::remove_file(&file);
    };
    let link = |target: &Path| {
        reset();
        std::os::unix::fs::symlink(target, &file).unwrap();
    };
    let refused = |what: &str, reason: &str| {
        let (code, message) = fixture.error(None, &[]);
        assert_eq!(code, "config_refused", "{what}: {message}");
        assert!(message.contains(".keel/config.toml"), "{what}: {message}");
        assert!(message.contains(reason), "{what}: {message}");
        assert!(!message.contains(SECRET), "{what}: {message}");
    };
    link(&outside);
    refused("a symlink out", "outside");
    link(Path::new("/proc/self/environ"));
    refused("a link to /proc/self/environ", "outside");
    link(Path::new("../../secret.toml"));
    refused("a relative link out", "outside");
    link(Path::new("/dev/zero"));
    refused("a link to /dev/zero", "outside");
    reset();
    let status = std::process::Command::new("mkfifo")
        .arg(&file)
        .status()
        .unwrap();
    assert!(status.success());
    refused("a FIFO", "named pipe (FIFO)");
    reset();
    std::fs::write(&file, vec![b'#'; 2 << 20]).unwrap();
    refused("a 2 MiB file", "more than");
    // Environment-like content in a regular file: the parse error gives a
    // line and column, not the line itself.
    reset();
    std::fs::write(
        &file,
        format!("HOME=/root\0KEEL_API_KEY={SECRET}\0PATH=/usr/bin\0"),
    )
    .unwrap();
    let (code, message) = fixture.error(None, &[]);
    assert_eq!(code, "config_invalid", "{message}");
    assert!(message.contains("line 1, column"), "{message}");
    assert!(
        !message.contains(SECRET) && !message.contains("/root"),
        "{message}"
    );
    // A symlink that stays inside the workspace is the project's own.
    reset();
    std::fs::write(fixture.workspace().join("keel.toml"), "mode = \"plan\"\n").unwrap();
    link(Path::new("../keel.toml"));
    let settings = fixture.load(None, &[]);
    assert_eq!(settings.defaults.mode, Some(PermissionMode::Plan));
}

/// The user's own file is regular and size-capped too: a FIFO in its place
/// is refused at once instead of hanging every run.
#[test]
fn a_user_file_that_is_a_fifo_is_refused() {
    let fixture = Fixture::new(USER);
    let path = fixture.dir.path().join("config.toml");
    std::fs::remove_file(&path).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    let (code, message) = fixture.error(None, &[]);
    assert_eq!(code, "config_refused", "{message}");
    assert!(message.contains("named pipe (FIFO)"), "{message}");
}

/// A user `config.toml` whose directory cannot be resolved (a link chain
/// planted in the workspace that resolves past `PATH_MAX`) cannot be shown
/// to lie outside the workspace: it is refused, never read as the user's
/// own by following the chain (here to `/proc/self/environ`).
#[test]
fn a_user_file_whose_directory_cannot_be_resolved_is_refused() {
    let fixture = Fixture::new(USER);
    let ws = fixture.workspace();
    let level = "d".repeat(200);
    let first: PathBuf = std::iter::repeat_n(level.as_str(), 12).collect();
    let rest: PathBuf = std::iter::repeat_n(level.as_str(), 13).collect();
    std::fs::create_dir_all(ws.join(&first)).unwrap();
    std::os::unix::fs::symlink(&first, ws.join("L")).unwrap();
    std::fs::create_dir_all(ws.join("L").join(&rest)).unwrap();
    std::os::unix::fs::symlink(&rest, ws.join("L/M")).unwrap();
    std::os::unix::fs::symlink("/proc/self/environ", ws.join("L/M/config.toml")).unwrap();
    // The user's configuration directory, by a link outside the workspace.
    let config = fixture.dir.path().join("cfg");
    std::os::unix::fs::symlink(ws.join("L/M"), &config).unwrap();
    let sources = {
        let mut sources = fixture.sources(None, &[]);
        sources.config_file = Some(config.join("config.toml"));
        sources
    };
    let error = Settings::load(&sources).unwrap_err();
    assert_eq!(error.code(), "config_refused", "{error}");
    assert!(error.to_string().contains("cannot be resolved"), "{error}");
    assert!(!error.to_string().contains("PATH="), "{error}");
}

/// The README's `[server]` example (a user's table) parses with every key,
/// `-c server.…` overrides it, a typo is an error, and a project's
/// `.keel/config.toml` cannot set it: dropped with a warning.
#[test]
fn the_server_table_comes_from_the_user_only() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let marker = "<!-- example server config -->";
    let body = readme[readme
        .find(marker)
        .expect("the README marks its [server] example")..]
        .split_once("```toml\n")
        .and_then(|(_, after)| after.split_once("```"))
        .map(|(body, _)| body)
        .expect("a toml block after the marker");
    let fixture = Fixture::new(body);
    let server = fixture.load(None, &[]).server;
    assert_eq!(server.listen.as_deref(), Some("0.0.0.0:7878"));
    assert_eq!((server.max_runs, server.max_queue), (Some(64), Some(256)));
    assert_eq!(server.drain_timeout, Some(30));
    assert_eq!(server.allow_origins, ["https://app.example.com"]);
    assert_eq!(server.max_message_bytes, Some(4_194_304));
    assert_eq!(server.max_connections_per_token, Some(1024));
    let home = std::env::var("HOME").unwrap();
    assert_eq!(
        server.token_file,
        Some(Path::new(&home).join(".config/keel/server-token"))
    );
    let ci = &server.tokens["ci"];
    assert_eq!(ci.token_file, Path::new("/etc/keel/ci.token"));
    assert_eq!(
        (ci.max_active_runs, ci.starts_per_minute),
        (Some(8), Some(60))
    );
    assert_eq!(ci.workspaces, [Path::new("/srv/ci")]);
    assert_eq!((ci.max_mode, ci.widen), (None, false));
    let raised = Fixture::new(
        "[server.tokens.ci]\ntoken_file = \"/t\"\nmax_mode = \"full\"\nwiden = true\n",
    )
    .load(None, &[])
    .server;
    assert_eq!(
        (raised.tokens["ci"].max_mode, raised.tokens["ci"].widen),
        (Some(PermissionMode::Full), true)
    );

    let overridden = fixture.load(None, &["server.max_runs=2"]).server;
    assert_eq!(overridden.max_runs, Some(2));
    let (code, message) = fixture.error(None, &["server.max_run=2"]);
    assert_eq!(code, "config_invalid", "{message}");
    assert!(
        message.contains("[server]") && message.contains("max_run"),
        "{message}"
    );

    let plain = Fixture::new("provider = \"scripted\"\n");
    plain.project("[server]\nlisten = \"0.0.0.0:1\"\ntoken_file = \"/tmp/t\"\n");
    let settings = plain.load(None, &[]);
    assert_eq!(
        settings.server,
        keel_host::server::ServerSettings::default()
    );
    assert!(
        settings
            .warnings
            .iter()
            .any(|warning| warning.code == "project_key_ignored"
                && warning.message.contains("`server`")),
        "{:?}",
        settings.warnings
    );
}

#[test]
fn permission_rules_are_unioned_and_the_project_may_add_only_ask_and_deny() {
    let fixture = Fixture::new(
        r#"
        provider = "local"

        [permissions]
        allow = ["bash(cargo test *)"]
        deny = ["bash(rm *)"]

        [profiles.strict.permissions]
        deny = ["bash(curl *)", "bash(rm *)"]
        "#,
    );
    fixture.project(
        r#"
        [permissions]
        allow = ["bash"]
        ask = ["read(secrets/**)"]
        deny = ["write(*.lock)"]
        "#,
    );
    let settings = fixture.load(Some("strict"), &[r#"permissions.ask=["mcp__github__*"]"#]);
    let rules = settings.defaults.permissions.clone().unwrap();
    assert_eq!(
        rules.allow,
        ["bash(cargo test *)"],
        "the project's `bash` is dropped"
    );
    assert_eq!(rules.ask, ["read(secrets/**)", "mcp__github__*"]);
    assert_eq!(rules.deny, ["bash(rm *)", "bash(curl *)", "write(*.lock)"]);
    let warning = settings
        .warnings
        .iter()
        .find(|warning| warning.message.contains("`permissions.allow`"))
        .unwrap();
    assert_eq!(warning.code, "project_widening");
    assert!(warning.message.contains(".keel/config.toml"), "{warning:?}");
    // They reach the host configuration.
    let setup = settings.resolve(Choices::default()).unwrap();
    assert_eq!(setup.config.permissions.deny, rules.deny);
    assert_eq!(setup.config.permissions.allow, rules.allow);

    // A rule that cannot be read names its file, key and index.
    let fixture = Fixture::new("[permissions]\nask = [\"read\", \"bash(\\\"x)\"]\n");
    let (code, message) = fixture.error(None, &[]);
    assert_eq!(code, "config_invalid");
    assert!(
        message.contains("config.toml") && message.contains("`permissions.ask[1]`"),
        "{message}"
    );
}
