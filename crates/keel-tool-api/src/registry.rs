//! The set of tools offered to the model, with compiled argument validators.
//!
//! Preparing a call looks the tool up and validates the arguments against its
//! JSON Schema; a call that fails either check never reaches the tool and
//! becomes an error ToolResult with a typed code.

use std::sync::Arc;

use keel_protocol::{BatchMode, ExecutionMode, ToolCall, ToolErrorCode, ToolSpec};
use serde_json::Value;

use crate::tool::{Tool, ToolError};

/// The tools offered to the model, each with its compiled schema validator.
#[derive(Default)]
pub struct ToolRegistry {
    tools: Vec<RegisteredTool>,
}

struct RegisteredTool {
    tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
}

/// A call whose tool exists and whose arguments passed validation.
#[derive(Clone)]
#[non_exhaustive]
pub struct PreparedCall {
    /// The tool to run.
    pub tool: Arc<dyn Tool>,
    /// The validated arguments.
    pub arguments: Value,
}

/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Another tool already has this name.
    #[error("a tool named `{0}` is already registered")]
    Duplicate(String),
    /// The tool's parameter schema is not a valid JSON Schema.
    #[error("tool `{name}` has an invalid parameter schema: {message}")]
    InvalidSchema {
        /// The tool.
        name: String,
        /// The schema compiler's message.
        message: String,
    },
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a tool, compiling its schema.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.name().to_owned();
        if self.get(&name).is_some() {
            return Err(RegistryError::Duplicate(name));
        }
        let validator = jsonschema::validator_for(&tool.parameters()).map_err(|error| {
            RegistryError::InvalidSchema {
                name: name.clone(),
                message: error.to_string(),
            }
        })?;
        self.tools.push(RegisteredTool { tool, validator });
        Ok(())
    }

    /// The tool named `name`, if registered.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.find(name).map(|registered| &registered.tool)
    }

    /// The names of all tools, in registration order.
    pub fn names(&self) -> Vec<String> {
        self.tools
            .iter()
            .map(|t| t.tool.name().to_owned())
            .collect()
    }

    /// The specs the model is told about, in registration order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|registered| {
                ToolSpec::new(
                    registered.tool.name().to_owned(),
                    registered.tool.description().to_owned(),
                    registered.tool.parameters(),
                )
            })
            .collect()
    }

    /// How a batch of calls is scheduled: sequential if any known tool is.
    pub fn batch_mode(&self, calls: &[ToolCall]) -> BatchMode {
        let any_sequential = calls.iter().any(|call| {
            self.get(&call.name)
                .is_some_and(|tool| tool.execution_mode() == ExecutionMode::Sequential)
        });
        if any_sequential {
            BatchMode::Sequential
        } else {
            BatchMode::Parallel
        }
    }

    /// Looks up the tool and validates the arguments.
    pub fn prepare(&self, call: &ToolCall) -> Result<PreparedCall, ToolError> {
        let registered = self.find(&call.name).ok_or_else(|| {
            ToolError::new(
                ToolErrorCode::UnknownTool,
                format!(
                    "Tool `{}` not found. Available tools: {}",
                    call.name,
                    self.names().join(", ")
                ),
            )
        })?;
        if let Value::String(raw) = &call.arguments {
            return Err(ToolError::new(
                ToolErrorCode::InvalidArguments,
                format!(
                    "Arguments for `{}` are not a JSON object: {}",
                    call.name,
                    excerpt(raw)
                ),
            ));
        }
        let problems: Vec<String> = registered
            .validator
            .iter_errors(&call.arguments)
            .map(|error| {
                let path = error.instance_path().to_string();
                if path.is_empty() {
                    error.to_string()
                } else {
                    format!("{path}: {error}")
                }
            })
            .collect();
        if !problems.is_empty() {
            return Err(ToolError::new(
                ToolErrorCode::InvalidArguments,
                format!(
                    "Invalid arguments for `{}`: {}",
                    call.name,
                    problems.join("; ")
                ),
            ));
        }
        Ok(PreparedCall {
            tool: Arc::clone(&registered.tool),
            arguments: call.arguments.clone(),
        })
    }

    fn find(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools
            .iter()
            .find(|registered| registered.tool.name() == name)
    }
}

fn excerpt(raw: &str) -> String {
    const MAX: usize = 200;
    match raw.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &raw[..cut]),
        None => raw.to_owned(),
    }
}
