//! `r8s kubectl`: the reference document's first stage in the one binary. kubeconfig loading
//! with kubectl's precedence and merge rules (`config`), aggregated discovery with kubectl's
//! disk cache (`discovery`), and the commands, printing what the Go kubectl prints.

pub mod config;
pub mod discovery;
pub mod error;
pub mod printers;
pub mod rest;
pub mod trace;

mod apply;
mod cp;
mod create;
mod delete;
mod describe;
mod exec;
mod explain;
mod generators;
mod get;
mod info;
mod kubeconfig_edit;
mod manifest;
mod modify;
mod oidc;
mod run;
mod top;

use std::ffi::OsString;
use std::io::Write;

use clap::{Parser, Subcommand};

use error::{Error, Result};

#[derive(Parser)]
#[command(
    name = "kubectl",
    about = "kubectl controls the Kubernetes cluster manager (r8s's own, in Rust).",
    disable_version_flag = true,
    // As pflag: a flag given twice takes the last value.
    args_override_self = true
)]
struct Cli {
    #[command(flatten)]
    flags: config::Flags,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Display one or many resources.
    Get(get::GetArgs),
    /// Show details of a specific resource or group of resources.
    Describe(describe::DescribeArgs),
    /// Create a resource from a file or from stdin, or with a generator.
    Create(create::CreateArgs),
    /// Apply a configuration to a resource by file name or stdin.
    Apply(apply::ApplyArgs),
    /// Diff the live version against a would-be applied version.
    Diff(apply::DiffArgs),
    /// Edit a resource on the server.
    Edit(apply::EditArgs),
    /// Replace a resource by file name or stdin.
    Replace(apply::ReplaceArgs),
    /// Auto-scale a deployment, replica set, stateful set, or replication controller.
    Autoscale(generators::AutoscaleArgs),
    /// Delete resources by file names, stdin, resources and names, or by resources and label selector.
    Delete(delete::DeleteArgs),
    /// Run a particular image on the cluster.
    Run(run::RunArgs),
    /// Take a replication controller, service, deployment or pod and expose it as a new Kubernetes service.
    Expose(run::ExposeArgs),
    /// Print the logs for a container in a pod.
    Logs(exec::LogsArgs),
    /// Execute a command in a container.
    Exec(exec::ExecArgs),
    /// Attach to a running container.
    Attach(exec::AttachArgs),
    /// Copy files and directories to and from containers.
    Cp(cp::CpArgs),
    /// Forward one or more local ports to a pod.
    PortForward(exec::PortForwardArgs),
    /// Update the labels on a resource.
    Label(modify::MetaArgs),
    /// Update the annotations on a resource.
    Annotate(modify::MetaArgs),
    /// Update fields of a resource.
    Patch(modify::PatchArgs),
    /// Set a new size for a deployment, replica set, replication controller, or stateful set.
    Scale(modify::ScaleArgs),
    /// Experimental: Wait for a specific condition on one or many resources.
    Wait(modify::WaitArgs),
    /// Set specific features on objects.
    #[command(subcommand)]
    Set(modify::SetCommand),
    /// Update the taints on one or more nodes.
    Taint(modify::TaintArgs),
    /// Mark node as unschedulable.
    Cordon { nodes: Vec<String> },
    /// Drain node in preparation for maintenance.
    Drain(modify::DrainArgs),
    /// Mark node as schedulable.
    Uncordon { nodes: Vec<String> },
    /// Manage the rollout of a resource.
    #[command(subcommand)]
    Rollout(modify::RolloutCommand),
    /// Display resource (CPU/memory) usage.
    #[command(subcommand)]
    Top(top::TopCommand),
    /// List events.
    Events(describe::EventsArgs),
    /// Display cluster information.
    ClusterInfo,
    /// Inspect authorization.
    #[command(subcommand)]
    Auth(info::AuthCommand),
    /// Print the client and server version information.
    Version(info::VersionArgs),
    /// Get documentation for a resource.
    Explain(explain::ExplainArgs),
    /// Print the supported API resources on the server.
    ApiResources(info::ApiResourcesArgs),
    /// Print the supported API versions on the server, in the form of "group/version".
    ApiVersions,
    /// Modify kubeconfig files.
    #[command(subcommand)]
    Config(info::ConfigCommand),
}

/// `create rolebinding|clusterrolebinding --user=…` names a subject: kubectl's flag of that
/// command shadows the global `--user` (the kubeconfig user). clap matches the global one
/// (and an argument of the same id would hand its values up to it), so after those
/// subcommands `--user` is renamed to the binding's own flag before parsing.
fn binding_subject_flags(args: Vec<OsString>) -> Vec<OsString> {
    let pos = args
        .windows(2)
        .position(|w| w[0] == "create" && (w[1] == "rolebinding" || w[1] == "clusterrolebinding"));
    let Some(pos) = pos else {
        return args;
    };
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            if i <= pos + 1 {
                return a;
            }
            match a.to_str() {
                Some("--user") => OsString::from("--subject-user"),
                Some(s) if s.starts_with("--user=") => OsString::from(format!("--subject-user={}", &s[7..])),
                _ => a,
            }
        })
        .collect()
}

/// Run kubectl with `args` (the first is the program name); the process's exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let cli = match Cli::try_parse_from(binding_subject_flags(args)) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    0
                }
                ErrorKind::UnknownArgument => {
                    let arg = e
                        .get(clap::error::ContextKind::InvalidArg)
                        .map(|v| v.to_string())
                        .unwrap_or_default();
                    eprintln!("error: unknown flag: {arg}\nSee 'kubectl --help' for usage.");
                    1
                }
                _ => {
                    let _ = e.print();
                    1
                }
            };
        }
    };
    // One thread: a CLI waits on the network, and a runtime with workers costs start-up time.
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let result = runtime.block_on(run(cli));
    // Not waiting for blocking reads still under way: after `exec -it` ends, standard input
    // (a terminal in raw mode, where no end-of-file comes) is still being read.
    runtime.shutdown_background();
    let _ = std::io::stdout().flush();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

async fn run(cli: Cli) -> Result<i32> {
    let flags = cli.flags;
    match cli.command {
        Command::Config(c) => info::config(&flags, c),
        Command::Version(a) => info::version(&flags, a).await,
        command => {
            let session = Session::open(&flags).await?;
            match command {
                Command::Get(a) => get::run(&session, a).await,
                Command::Describe(a) => describe::run(&session, a).await,
                Command::Create(a) => create::run(&session, a).await,
                Command::Apply(a) => apply::run(&session, a).await,
                Command::Replace(a) => apply::replace(&session, a).await,
                Command::Edit(a) => apply::edit(&session, a).await,
                Command::Diff(a) => apply::diff(&session, a).await,
                Command::Autoscale(a) => generators::autoscale(&session, a).await,
                Command::Delete(a) => delete::run(&session, a).await,
                Command::ApiResources(a) => info::api_resources(&session, a).await,
                Command::ApiVersions => info::api_versions(&session).await,
                Command::Explain(a) => explain::run(&session, a).await,
                Command::Run(a) => run::run(&session, a).await,
                Command::Expose(a) => run::expose(&session, a).await,
                Command::Logs(a) => exec::logs(&session, a).await,
                Command::Exec(a) => exec::exec(&session, a).await,
                Command::PortForward(a) => exec::port_forward(&session, a).await,
                Command::Attach(a) => exec::attach(&session, a).await,
                Command::Cp(a) => cp::run(&session, a).await,
                Command::Label(a) => modify::metadata(&session, a, true).await,
                Command::Annotate(a) => modify::metadata(&session, a, false).await,
                Command::Patch(a) => modify::patch_cmd(&session, a).await,
                Command::Scale(a) => modify::scale(&session, a).await,
                Command::Wait(a) => modify::wait(&session, a).await,
                Command::Set(c) => modify::set(&session, c).await,
                Command::Taint(a) => modify::taint(&session, a).await,
                Command::Cordon { nodes } => modify::cordon(&session, nodes, true).await,
                Command::Drain(a) => modify::drain(&session, a).await,
                Command::Uncordon { nodes } => modify::cordon(&session, nodes, false).await,
                Command::Rollout(c) => modify::rollout(&session, c).await,
                Command::ClusterInfo => info::cluster_info(&session).await,
                Command::Events(a) => describe::events(&session, a).await,
                Command::Top(c) => top::top(&session, c).await,
                Command::Auth(c) => info::auth(&session, c).await,
                Command::Config(_) | Command::Version(_) => unreachable!("handled above"),
            }
        }
    }
}

/// What a command works with: the connection and the discovery cache, loaded lazily.
pub(crate) struct Session {
    pub conn: config::Connection,
    pub flags: config::Flags,
    discovery: tokio::sync::OnceCell<discovery::Discovery>,
}

impl Session {
    async fn open(flags: &config::Flags) -> Result<Session> {
        let files = config::files(flags)?;
        let mut merged = config::load(&files)?;
        let user = config::current_user(flags, &merged);
        oidc::refresh(&files, &user, &mut merged).await?;
        let conn = config::connect(flags, &merged).await?;
        Ok(Session {
            conn,
            flags: flags.clone(),
            discovery: tokio::sync::OnceCell::new(),
        })
    }

    fn cache_dir(&self) -> std::path::PathBuf {
        discovery::cache_dir_for(&config::cache_dir(&self.flags), &self.conn.server)
    }

    pub async fn discovery(&self) -> Result<&discovery::Discovery> {
        self.discovery
            .get_or_try_init(|| async {
                discovery::Discovery::load(&self.conn.rest, &self.cache_dir()).await
            })
            .await
    }

    /// A resource by any of its names; a miss in a cached discovery refreshes it once, as
    /// kubectl's deferred RESTMapper does.
    pub async fn resource(&self, arg: &str) -> Result<discovery::Resource> {
        let d = self.discovery().await?;
        if let Some(r) = d.resolve(arg) {
            return Ok(r.clone());
        }
        if d.from_cache {
            let fresh = discovery::Discovery::refresh(&self.conn.rest, &self.cache_dir()).await?;
            if let Some(r) = fresh.resolve(arg) {
                return Ok(r.clone());
            }
        }
        Err(error::msg(format!(
            "the server doesn't have a resource type \"{arg}\""
        )))
    }

    /// A resource by kind and apiVersion (a manifest's), as the RESTMapper maps them.
    pub async fn resource_for_kind(&self, api_version: &str, kind: &str) -> Result<discovery::Resource> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let find = |d: &discovery::Discovery| {
            d.resources
                .iter()
                .find(|r| r.group == group && r.version == version && r.kind == kind)
                .cloned()
        };
        let d = self.discovery().await?;
        if let Some(r) = find(d) {
            return Ok(r);
        }
        if d.from_cache {
            let fresh = discovery::Discovery::refresh(&self.conn.rest, &self.cache_dir()).await?;
            if let Some(r) = find(&fresh) {
                return Ok(r);
            }
        }
        Err(Error::Message(format!(
            "resource mapping not found for name: \"\" namespace: \"\" from \"\": no matches for kind \"{kind}\" in version \"{api_version}\"\nensure CRDs are installed first"
        )))
    }
}

/// kubectl's `-o` values other than the table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Output {
    Table {
        wide: bool,
    },
    Yaml,
    Json,
    Name,
    JsonPath(Vec<printers::jsonpath::NodeHandle>),
    /// A Go template (`go-template=`, `template=`, or from a file).
    GoTemplate(String),
    /// Column names and their JSONPath templates.
    CustomColumns(Vec<(String, Vec<printers::jsonpath::NodeHandle>)>),
}

impl Output {
    pub fn parse(o: Option<&str>) -> Result<Output> {
        Ok(match o.unwrap_or("") {
            "" => Output::Table { wide: false },
            "wide" => Output::Table { wide: true },
            "yaml" => Output::Yaml,
            "json" => Output::Json,
            "name" => Output::Name,
            o if o.starts_with("jsonpath=") || o.starts_with("jsonpath-file=") => {
                let (kind, arg) = o.split_once('=').unwrap_or((o, ""));
                let template = if kind == "jsonpath-file" {
                    std::fs::read_to_string(arg)
                        .map_err(|e| error::msg(format!("error reading --template {arg}, {e}")))?
                } else {
                    arg.to_owned()
                };
                Output::JsonPath(printers::jsonpath::parse(&template).map_err(|e| {
                    error::msg(format!("error parsing jsonpath {template}, {e}"))
                })?)
            }
            o if ["go-template=", "template=", "go-template-file=", "templatefile="]
                .iter()
                .any(|p| o.starts_with(p)) =>
            {
                let (kind, arg) = o.split_once('=').unwrap_or((o, ""));
                let template = if kind.ends_with("file") {
                    std::fs::read_to_string(arg)
                        .map_err(|e| error::msg(format!("error reading --template {arg}, {e}")))?
                } else {
                    arg.to_owned()
                };
                printers::gotemplate::check(&template).map_err(error::msg)?;
                Output::GoTemplate(template)
            }
            o if o.starts_with("custom-columns=") => {
                let spec = &o["custom-columns=".len()..];
                let mut columns = Vec::new();
                for col in spec.split(',') {
                    let Some((name, path)) = col.split_once(':') else {
                        return Err(error::msg(format!(
                            "unexpected custom-columns spec: {col}, expected <header>:<json-path-expr>"
                        )));
                    };
                    let template = if path.starts_with('{') {
                        path.to_owned()
                    } else {
                        format!("{{{path}}}")
                    };
                    let nodes = printers::jsonpath::parse(&template)
                        .map_err(|e| error::msg(format!("error parsing jsonpath {template}, {e}")))?;
                    columns.push((name.to_owned(), nodes));
                }
                Output::CustomColumns(columns)
            }
            other => {
                return Err(error::msg(format!(
                    "unable to match a printer suitable for the output format \"{other}\", allowed formats are: custom-columns,custom-columns-file,go-template,go-template-file,json,jsonpath,jsonpath-as-json,jsonpath-file,name,template,templatefile,wide,yaml"
                )))
            }
        })
    }
}

/// Print to stdout, ignoring a closed pipe (`| head`).
pub(crate) fn out(s: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(s.as_bytes());
}
