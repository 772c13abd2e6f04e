//! The words of `--help` that clap cannot derive: what each way of running
//! Keel is for, examples, the demo cases and the schema names.
//!
//! They are constants so clap can show them; `tests/help.rs` checks that
//! the demo cases and schema names here are the ones the commands accept.

/// `keel --help`'s description.
pub const LONG_ABOUT: &str = "Keel: a headless coding-agent kernel.

It streams a model, runs the model's tool calls in a workspace under a
permission mode you fix, and stores every run in a session.";

/// What `keel -h` shows after the commands.
pub const AFTER_HELP: &str = "\
Modes of running (one line each):
  keel (or keel chat)          a conversation on the terminal: each prompt a run
                               in one session
  keel run PROMPT              a run in this directory; a live view on a terminal,
                               only the final message when piped
  keel run -q PROMPT           print only the final message
  keel run --output-format json|stream-json PROMPT
                               one JSON object at the end | JSON Lines as it goes
  keel demo NAME               a scripted scenario: no key, no network
  keel session list|show|tree  what earlier runs stored
  keel rpc | keel serve        the host protocol on stdio | a WebSocket

Examples:
  keel demo tool-loop
  keel run --provider deepseek --model deepseek-chat \"Fix the failing test\"
  echo \"Summarise README.md\" | keel run --mode plan --provider deepseek

More with --help (long form).";

/// What `keel --help` shows after the commands.
pub const AFTER_LONG_HELP: &str = "\
Modes of running (one line each):
  keel (or keel chat)          a conversation on the terminal: each prompt a run
                               in one session (/help inside lists its commands)
  keel run PROMPT              a run in this directory; a live view on a terminal,
                               only the final message when piped
  keel run -q PROMPT           print only the final message (also on a terminal)
  keel run --output-format json PROMPT
                               one JSON object when the run ends
  keel run --output-format stream-json PROMPT
                               JSON Lines as the run goes (for programs)
  keel demo NAME               a scripted scenario: no key, no network
  keel session list|show|tree  what earlier runs stored (text; --output-format
                               json or stream-json for programs, as for models,
                               doctor and version)
  keel rpc                     JSON-RPC 2.0 on stdin/stdout, for scripts
  keel serve                   the same over WebSocket, for services

Permission modes (--mode, fixed for the run):
  plan   read-only: reads and sandboxed read-only commands; no writes
  ask    workspace reads run; everything else asks you first
  auto   workspace reads, writes and sandboxed commands run; outside and network ask (default)
  full   everything runs without asking and without the OS sandbox

Examples:
  keel demo tool-loop
  keel run --provider deepseek --model deepseek-chat \"Fix the failing test\"
  echo \"Summarise README.md\" | keel run --mode plan --provider deepseek
  keel run -q -o answer.txt --provider anthropic @task.md
  keel completion bash > ~/.local/share/bash-completion/completions/keel

Environment:
  KEEL_LOG       diagnostics filter (e.g. `info`, `keel_kernel=debug`); off by default
  NO_COLOR       any value: no colour and no escape codes in the view
  XDG_CONFIG_HOME, XDG_DATA_HOME
                 where config.toml and sessions live (keel/ under each)

Exit codes: 0 settled; 1 failed or cancelled; 2 startup error;
128 + signal after SIGINT (130), SIGTERM (143) or SIGHUP (129).";

/// `keel run --help`'s examples.
pub const RUN_EXAMPLES: &str = "\
Examples:
  keel run --provider deepseek --model deepseek-chat \"Fix the failing test\"
  keel run --provider openai-compatible --base-url http://127.0.0.1:8080/v1 --model m \"…\"
  keel run --mode ask --provider anthropic @task.md
  echo \"Explain src/main.rs\" | keel run -q --mode plan --provider deepseek
  keel run --output-format stream-json --provider scripted --script s.json \"go\" | jq .type

In ask mode on a terminal each request is one line; answer y (once), a
(always for this session: later calls of the same tool on the exact same
command or path are allowed without asking while they resolve to the same
files and programs) or n. Piped, one JSON answer
per line (the request ids are in --output-format stream-json): {\"request_id\": \"…\", \"decision\": \"approve\"} (or \"deny\").";

/// `keel replay --help`'s examples.
pub const REPLAY_EXAMPLES: &str = "\
Examples:
  keel replay 01a23582-7b               tools answered from the record
  keel replay 01a23582-7b --live-tools  the real tools again, in a copy of the start workspace
  keel replay 01a23582-7b --json | jq .divergence

A replay checks that this Keel drives a recorded session the same way
(debugging a run offline, or an old session under a new version). A tool
whose output is not deterministic (time, random bytes) diverges under
--live-tools at its call.";

/// `keel resume --help`'s examples.
pub const RESUME_EXAMPLES: &str = "\
Examples:
  keel resume                        pick one of this workspace's sessions (on a terminal)
  keel resume --last \"now run the tests\"
  keel resume 01a23582-7b \"and update the changelog\"
  keel resume 01a23582-7b            recover the run a crash interrupted

Sessions are named by the shortest prefix of their id that no other session
shares, as `keel session list` shows them.";

/// `keel chat --help`'s keys and commands.
pub const CHAT_HELP: &str = "\
Keys:
  Enter            send the prompt (a follow-up while a run works)
  \\ then Enter     continue the prompt on the next line (Alt-Enter too)
  Ctrl-C           cancel the current run; twice within 2 s leaves (status 130)
  Ctrl-D           on an empty line: leave (status 0)
  Up / Down        history ($XDG_STATE_HOME/keel/history, mode 0600)

Typed at the prompt:
  /mode MODE  /model NAME  /compact [TEXT]  /fork [ENTRY]  /sessions
  /resume ID  /cost  /help  /exit

A permission question is answered by the next line: y (once), a (always
for this session) or n.";

/// `keel demo --help`'s list of cases.
pub const DEMO_CASES: &str = "\
Cases (--case; the first is the default):
  streamed-run   success, provider-error
  tool-loop      success, mixed-batch, failure
  run-control    steering, follow-up, cancel, retry-success, retry-failure
  session-tree   success, invalid-entry
  permissions    standard, cancel, host-disconnect, resume (with --mode plan|ask|auto|full)";

/// `keel schema --help`'s list of names.
pub const SCHEMA_NAMES: &str = "\
Names:
  run_event      every event of a run (one JSON line each, tagged by `type`)
  run_result     a run's final state, message and error
  message        user, assistant and tool-result messages
  provider_event the deltas inside `message_update`
  entry          one session entry
  tool_spec      a tool offered to the model
  host_control   what a host sends a run (steer, follow-up, cancel, answers)
  host_line      keel's other output lines: result, workspace_changes, session, startup_error, compaction, compaction_failed
  rpc_request    a JSON-RPC 2.0 request to `keel rpc` / `keel serve`
  rpc_response   its response (a result or a typed error)
  rpc_notification  a message of the server that answers nothing
  rpc_initialize_params  `initialize`'s parameters
  rpc_initialize_response  `initialize`'s result
  rpc_run_start_params  `run/start`'s parameters
  rpc_run_start_response  `run/start`'s result
  rpc_run_steer_params  `run/steer`'s parameters
  rpc_run_steer_response  `run/steer`'s result
  rpc_run_follow_up_params  `run/follow_up`'s parameters
  rpc_run_follow_up_response  `run/follow_up`'s result
  rpc_run_cancel_params  `run/cancel`'s parameters
  rpc_run_cancel_response  `run/cancel`'s result
  rpc_run_result_params  `run/result`'s parameters
  rpc_run_result_response  `run/result`'s result
  rpc_run_subscribe_params  `run/subscribe`'s parameters
  rpc_run_subscribe_response  `run/subscribe`'s result
  rpc_run_queue_params  `run/queue`'s parameters
  rpc_run_queue_response  `run/queue`'s result
  rpc_run_queue_clear_params  `run/queue/clear`'s parameters
  rpc_run_queue_clear_response  `run/queue/clear`'s result
  rpc_permission_resolve_params  `permission/resolve`'s parameters
  rpc_permission_resolve_response  `permission/resolve`'s result
  rpc_session_list_params  `session/list`'s parameters
  rpc_session_list_response  `session/list`'s result
  rpc_session_get_params  `session/get`'s parameters
  rpc_session_get_response  `session/get`'s result
  rpc_session_tree_params  `session/tree`'s parameters
  rpc_session_tree_response  `session/tree`'s result
  rpc_session_fork_params  `session/fork`'s parameters
  rpc_session_fork_response  `session/fork`'s result
  rpc_session_set_leaf_params  `session/set_leaf`'s parameters
  rpc_session_set_leaf_response  `session/set_leaf`'s result
  rpc_session_compact_params  `session/compact`'s parameters
  rpc_session_compact_response  `session/compact`'s result
  rpc_session_resume_params  `session/resume`'s parameters
  rpc_session_resume_response  `session/resume`'s result
  rpc_models_list_params  `models/list`'s parameters
  rpc_models_list_response  `models/list`'s result
  rpc_run_event_notification  `run/event`: one event of a subscribed run
  rpc_events_lagged_notification  `run/events_lagged`: a subscription that fell behind";

/// What `keel rpc --help` shows after the options.
pub const RPC_EXAMPLES: &str = "\
Examples:
  keel rpc --script docs/examples/look-around.json
  printf '%s\\n' '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}' | keel rpc

Methods: initialize, run/start, run/steer, run/follow_up, run/cancel,
run/result, run/subscribe, run/queue, run/queue/clear, permission/resolve,
session/list, session/get, session/tree, session/fork, session/set_leaf,
session/compact, session/resume, models/list; events arrive as run/event
notifications (`keel schema` lists the types). README: Keel as a service.";

/// What `keel serve --help` shows after the options.
pub const SERVE_EXAMPLES: &str = "\
Examples:
  keel serve --script docs/examples/look-around.json      # ws://127.0.0.1:7878/
  KEEL_SERVER_TOKEN=$(cat ~/.keel-token) keel serve --listen 0.0.0.0:7878

Security: loopback by default; any other address refuses to start without
a token. Clients send it as `Authorization: Bearer TOKEN` (never in the URL:
`?token=` is refused); anonymous or wrong tokens get 401, a browser Origin
not allowed with --allow-origin gets 403. GET /health needs no token;
GET /metrics (Prometheus text) does. README: Keel as a service.";
