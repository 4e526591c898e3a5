//! The volume manager (upstream `pkg/kubelet/volumemanager` with the in-tree plugins of
//! `pkg/volume`): before a pod's containers start, each of its volumes is made ready under
//! `<agent dir>/pods/<pod uid>/volumes/<plugin>/<volume name>`, and when the pod is gone all of
//! it is unmounted and removed.
//!
//! - emptyDir: a directory (`medium: Memory`: a tmpfs, sized by `sizeLimit`), shared by all the
//!   pod's containers.
//! - hostPath: the host's path itself, after upstream's `type` checks.
//! - configMap, secret, downwardAPI, projected: files written the way upstream's `AtomicWriter`
//!   writes them — a timestamped `..<ts>` directory, the `..data` symlink swapped to it with a
//!   rename, one symlink per top-level name — so that a running container sees a whole new
//!   version at once. They are rewritten whenever the source changes (on every pod sync,
//!   through a short-lived cache of the objects, upstream's TTL change-detection strategy).
//!   Secret and projected volumes live on tmpfs, as upstream's, so no key or token touches disk.
//! - projected serviceAccountToken: a bound token from the TokenRequest API, refreshed when 80 %
//!   of its lifetime has passed or it is 24 hours old (upstream's token manager).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod, Secret,
    ServiceAccount, Volume,
};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tracing::Instrument;

use crate::spec::{self, NodeContext};

pub const EMPTY_DIR: &str = "kubernetes.io~empty-dir";
pub const HOST_PATH: &str = "kubernetes.io~host-path";
pub const CONFIG_MAP: &str = "kubernetes.io~configmap";
pub const SECRET: &str = "kubernetes.io~secret";
pub const DOWNWARD_API: &str = "kubernetes.io~downward-api";
pub const PROJECTED: &str = "kubernetes.io~projected";

/// The symlink that names the current version of an atomically written volume.
pub const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";

/// How long a configMap or secret read from the API serves the pods that use it, at least: the
/// node's `node.alpha.kubernetes.io/ttl` (the TTL controller's, growing with the cluster) when
/// longer (`set_object_ttl`).
const OBJECT_TTL: Duration = Duration::from_secs(5);
/// The node annotation that says how long the kubelet may serve configMaps and secrets from
/// its cache (upstream's `v1.ObjectTTLAnnotationKey`).
pub const TTL_ANNOTATION: &str = "node.alpha.kubernetes.io/ttl";
/// Upstream's token manager: refresh at 80 % of the lifetime, and at the latest after 24 h.
const TOKEN_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
const DEFAULT_TOKEN_EXPIRATION: i64 = 3600;
/// 0644, the default mode of configMap, secret, downwardAPI and projected files.
pub const DEFAULT_MODE: u32 = 0o644;

/// A volume ready for the pod's containers: where it is on the host, and whether containers
/// must see it read-only whatever their mounts say (API data volumes, as upstream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostVolume {
    pub path: PathBuf,
    pub read_only: bool,
}

/// An object read from the API: found, known not to exist, or unreadable (the message).
#[derive(Clone, Debug)]
pub enum Lookup<T> {
    Found(T),
    NotFound,
    Failed(String),
}

impl<T> Lookup<T> {
    /// The object, `None` when missing and `optional`, else upstream's error message.
    pub fn required(&self, kind: &str, name: &str, optional: bool) -> Result<Option<&T>, String> {
        match self {
            Lookup::Found(v) => Ok(Some(v)),
            Lookup::NotFound if optional => Ok(None),
            Lookup::NotFound => Err(format!("{kind} \"{name}\" not found")),
            Lookup::Failed(e) => Err(e.clone()),
        }
    }
}

/// One file of a volume: its bytes and mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// What an atomically written volume holds, by relative path.
pub type Payload = BTreeMap<String, FileProjection>;

/// A volume that could not be made ready. `blocking`: the pod's containers cannot start
/// because the volume has never been ready for this pod (a running pod keeps the last version).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeError {
    pub volume: String,
    pub message: String,
    pub blocking: bool,
}

impl VolumeError {
    /// Upstream's FailedMount event message.
    pub fn event_message(&self) -> String {
        format!(
            "MountVolume.SetUp failed for volume \"{}\" : {}",
            self.volume, self.message
        )
    }
}

struct Token {
    token: String,
    refresh_at: std::time::SystemTime,
}

type ObjectKey = (String, String);
/// Objects read from the API, by namespace and name, with when they were read.
type ObjectCache<T> = Mutex<HashMap<ObjectKey, (Instant, Lookup<Arc<T>>)>>;

pub struct VolumeManager {
    /// `<agent dir>/pods`.
    root: PathBuf,
    client: Client,
    config_maps: ObjectCache<ConfigMap>,
    secrets: ObjectCache<Secret>,
    /// Bound tokens by pod uid, service account, audience and lifetime.
    tokens: Mutex<HashMap<(String, String, String, i64), Token>>,
    /// The (pod uid, volume) pairs that have been ready at least once.
    ready: Mutex<HashSet<(String, String)>>,
    /// The pods (uids) using each mounted local volume: unmounted when the last goes.
    local_users: Mutex<HashMap<PathBuf, HashSet<String>>>,
    /// How long a configMap or secret serves (seconds): `OBJECT_TTL` or the node's annotation.
    object_ttl: std::sync::atomic::AtomicU64,
    /// One read of a configMap or secret at a time: the pods that miss the cache together
    /// wait for the first one's read instead of each reading it.
    fetching: tokio::sync::Mutex<()>,
    /// Whether volumes are mounted (tmpfs for keys and tokens, file systems for local
    /// volumes). A hollow node mounts nothing (kubemark's fake mounter): its volumes are plain
    /// directories, and the mount table is never read.
    mounts: bool,
}

impl VolumeManager {
    pub fn new(root: PathBuf, client: Client) -> Self {
        Self {
            root,
            client,
            config_maps: Mutex::default(),
            secrets: Mutex::default(),
            tokens: Mutex::default(),
            ready: Mutex::default(),
            local_users: Mutex::default(),
            object_ttl: std::sync::atomic::AtomicU64::new(OBJECT_TTL.as_secs()),
            fetching: tokio::sync::Mutex::new(()),
            mounts: true,
        }
    }

    /// The node's `node.alpha.kubernetes.io/ttl` annotation, if it has one: configMaps and
    /// secrets serve that long (never less than `OBJECT_TTL`).
    pub fn set_object_ttl(&self, annotation: Option<&str>) {
        let secs = annotation
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            .max(OBJECT_TTL.as_secs());
        self.object_ttl.store(secs, std::sync::atomic::Ordering::Relaxed);
    }

    fn object_ttl(&self) -> Duration {
        Duration::from_secs(self.object_ttl.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The same, mounting nothing (a hollow node's: its pods run no processes, and thousands
    /// of them would fill the machine's mount table).
    pub fn without_mounts(mut self) -> Self {
        self.mounts = false;
        self
    }

    /// `<root>/<uid>`.
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root.join(uid)
    }

    /// `<root>/<uid>/volumes/<plugin>/<name>`.
    pub fn volume_dir(&self, uid: &str, plugin: &str, name: &str) -> PathBuf {
        self.pod_dir(uid).join("volumes").join(plugin).join(name)
    }

    /// The uids of the pods that have a directory here.
    pub fn pods_on_disk(&self) -> Vec<String> {
        std::fs::read_dir(&self.root)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A configMap of `ns`, at most the object TTL old.
    pub async fn config_map(&self, ns: &str, name: &str) -> Lookup<Arc<ConfigMap>> {
        let key = (ns.to_string(), name.to_string());
        let fresh = |cache: &ObjectCache<ConfigMap>| {
            let cache = cache.lock().unwrap();
            let (at, v) = cache.get(&key)?;
            (at.elapsed() < self.object_ttl()).then(|| v.clone())
        };
        if let Some(v) = fresh(&self.config_maps) {
            return v;
        }
        let _reading = self.fetching.lock().await;
        if let Some(v) = fresh(&self.config_maps) {
            return v;
        }
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let v = lookup(api.get_opt(name).await, "configmap", name);
        self.config_maps
            .lock()
            .unwrap()
            .insert(key, (Instant::now(), v.clone()));
        v
    }

    /// A secret of `ns`, at most the object TTL old.
    pub async fn secret(&self, ns: &str, name: &str) -> Lookup<Arc<Secret>> {
        let key = (ns.to_string(), name.to_string());
        let fresh = |cache: &ObjectCache<Secret>| {
            let cache = cache.lock().unwrap();
            let (at, v) = cache.get(&key)?;
            (at.elapsed() < self.object_ttl()).then(|| v.clone())
        };
        if let Some(v) = fresh(&self.secrets) {
            return v;
        }
        let _reading = self.fetching.lock().await;
        if let Some(v) = fresh(&self.secrets) {
            return v;
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        let v = lookup(api.get_opt(name).await, "secret", name);
        self.secrets
            .lock()
            .unwrap()
            .insert(key, (Instant::now(), v.clone()));
        v
    }

    /// Make every volume of `pod` ready (again: sources that changed are rewritten). Returns
    /// the volumes that are ready and the errors of those that are not.
    pub async fn setup(
        &self,
        pod: &Pod,
        node: &NodeContext,
    ) -> (BTreeMap<String, HostVolume>, Vec<VolumeError>) {
        let uid = pod.uid().unwrap_or_default();
        let mut ready = BTreeMap::new();
        let mut errors = Vec::new();
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        for v in &volumes {
            let span = tracing::debug_span!("kubelet.mount_volume", volume = %v.name);
            match self.setup_one(pod, v, node).instrument(span).await {
                Ok(h) => {
                    // fsGroup: the pod's volumes (not host paths) belong to that group.
                    let sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
                    if let (Some(gid), None) = (sc.and_then(|c| c.fs_group), &v.host_path) {
                        let policy = sc.and_then(|c| c.fs_group_change_policy.as_deref());
                        if let Err(e) = set_volume_ownership(&h.path, gid as u32, h.read_only, policy) {
                            tracing::warn!(volume = %v.name, error = %e, "kubelet: fsGroup ownership");
                        }
                    }
                    self.ready.lock().unwrap().insert((uid.clone(), v.name.clone()));
                    ready.insert(v.name.clone(), h);
                }
                Err(message) => {
                    // Ready before (in this process, or on disk from an earlier one): the
                    // pod keeps the last version.
                    let existing = self.existing(&uid, v).filter(|h| {
                        self.ready
                            .lock()
                            .unwrap()
                            .contains(&(uid.clone(), v.name.clone()))
                            || std::fs::symlink_metadata(h.path.join(DATA_DIR)).is_ok()
                    });
                    let was_ready = existing.is_some();
                    if let Some(h) = existing {
                        ready.insert(v.name.clone(), h);
                    }
                    errors.push(VolumeError {
                        volume: v.name.clone(),
                        message,
                        blocking: !was_ready,
                    });
                }
            }
        }
        (ready, errors)
    }

    /// Where an already-ready volume is (after a failed refresh).
    fn existing(&self, uid: &str, v: &Volume) -> Option<HostVolume> {
        let (plugin, read_only) = if v.config_map.is_some() {
            (CONFIG_MAP, true)
        } else if v.secret.is_some() {
            (SECRET, true)
        } else if v.downward_api.is_some() {
            (DOWNWARD_API, true)
        } else if v.projected.is_some() {
            (PROJECTED, true)
        } else if v.empty_dir.is_some() {
            (EMPTY_DIR, false)
        } else {
            return None;
        };
        Some(HostVolume {
            path: self.volume_dir(uid, plugin, &v.name),
            read_only,
        })
    }

    async fn setup_one(&self, pod: &Pod, v: &Volume, node: &NodeContext) -> Result<HostVolume, String> {
        let uid = pod.uid().unwrap_or_default();
        let ns = pod.namespace().unwrap_or_default();
        let io = |e: io::Error| e.to_string();
        if let Some(ed) = &v.empty_dir {
            let dir = self.volume_dir(&uid, EMPTY_DIR, &v.name);
            std::fs::create_dir_all(&dir).map_err(io)?;
            if self.mounts && ed.medium.as_deref() == Some("Memory") && !is_mount_point(&dir) {
                let size = ed
                    .size_limit
                    .as_ref()
                    .and_then(|q| r8s_api::quantity::parse_value(&q.0).ok())
                    .or_else(|| pod_memory_limit(pod))
                    .filter(|s| *s > 0)
                    .or(Some(node.allocatable_memory).filter(|s| *s > 0));
                mount_tmpfs(&dir, size).map_err(|e| format!("mounting tmpfs at {}: {e}", dir.display()))?;
            }
            // As upstream: every container, whatever its user, may write an emptyDir.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).map_err(io)?;
            return Ok(HostVolume {
                path: dir,
                read_only: false,
            });
        }
        if let Some(hp) = &v.host_path {
            let path = PathBuf::from(&hp.path);
            check_host_path(&path, hp.type_.as_deref().unwrap_or(""))?;
            return Ok(HostVolume {
                path,
                read_only: false,
            });
        }
        if let Some(src) = &v.persistent_volume_claim {
            let (path, read_only) = self
                .claim_volume(&ns, &src.claim_name, None, Some(&uid), node)
                .await?;
            return Ok(HostVolume {
                path,
                read_only: read_only || src.read_only.unwrap_or(false),
            });
        }
        if v.ephemeral.is_some() {
            // A generic ephemeral volume: the claim its controller made for this pod.
            let claim = format!("{}-{}", pod.name_any(), v.name);
            let (path, read_only) = self
                .claim_volume(&ns, &claim, Some(pod), Some(&uid), node)
                .await?;
            return Ok(HostVolume { path, read_only });
        }
        let (plugin, payload) = if let Some(src) = &v.config_map {
            let name = src.name.clone();
            let optional = src.optional.unwrap_or(false);
            let cm = self.config_map(&ns, &name).await;
            let payload = match cm.required("configmap", &name, optional)? {
                Some(cm) => config_map_payload(cm, src.items.as_deref(), src.default_mode, optional)?,
                None => Payload::new(),
            };
            (CONFIG_MAP, payload)
        } else if let Some(src) = &v.secret {
            let name = src.secret_name.clone().unwrap_or_default();
            let optional = src.optional.unwrap_or(false);
            let s = self.secret(&ns, &name).await;
            let payload = match s.required("secret", &name, optional)? {
                Some(s) => secret_payload(s, src.items.as_deref(), src.default_mode, optional)?,
                None => Payload::new(),
            };
            (SECRET, payload)
        } else if let Some(src) = &v.downward_api {
            let payload = downward_api_payload(
                pod,
                src.items.as_deref().unwrap_or_default(),
                src.default_mode,
                node,
            )?;
            (DOWNWARD_API, payload)
        } else if let Some(src) = &v.projected {
            let default_mode = src.default_mode;
            let mut payload = Payload::new();
            let mut errs = Vec::new();
            for source in src.sources.iter().flatten() {
                let part = if let Some(t) = &source.service_account_token {
                    let exp = t.expiration_seconds.unwrap_or(DEFAULT_TOKEN_EXPIRATION);
                    let audience = t.audience.clone().unwrap_or_default();
                    self.token(pod, &audience, exp).await.map(|token| {
                        Payload::from([(
                            t.path.clone(),
                            FileProjection {
                                data: token.into_bytes(),
                                mode: mode_or(default_mode),
                            },
                        )])
                    })
                } else if let Some(c) = &source.config_map {
                    let optional = c.optional.unwrap_or(false);
                    match self
                        .config_map(&ns, &c.name)
                        .await
                        .required("configmap", &c.name, optional)
                    {
                        Ok(Some(cm)) => config_map_payload(cm, c.items.as_deref(), default_mode, optional),
                        Ok(None) => Ok(Payload::new()),
                        Err(e) => Err(e),
                    }
                } else if let Some(s) = &source.secret {
                    let optional = s.optional.unwrap_or(false);
                    match self
                        .secret(&ns, &s.name)
                        .await
                        .required("secret", &s.name, optional)
                    {
                        Ok(Some(sec)) => secret_payload(sec, s.items.as_deref(), default_mode, optional),
                        Ok(None) => Ok(Payload::new()),
                        Err(e) => Err(e),
                    }
                } else if let Some(d) = &source.downward_api {
                    downward_api_payload(pod, d.items.as_deref().unwrap_or_default(), default_mode, node)
                } else {
                    Ok(Payload::new())
                };
                match part {
                    Ok(p) => payload.extend(p),
                    Err(e) => errs.push(e),
                }
            }
            if !errs.is_empty() {
                return Err(errs.join(", "));
            }
            (PROJECTED, payload)
        } else {
            return Err("volume type not supported by this kubelet".into());
        };
        let dir = self.volume_dir(&uid, plugin, &v.name);
        std::fs::create_dir_all(&dir).map_err(io)?;
        // Keys and tokens stay in memory, as upstream's secret and projected volumes.
        if self.mounts && (plugin == SECRET || plugin == PROJECTED) && !is_mount_point(&dir) {
            mount_tmpfs(&dir, None).map_err(|e| format!("mounting tmpfs at {}: {e}", dir.display()))?;
        }
        write_atomically(&dir, &payload).map_err(|e| format!("writing data to {}: {e}", dir.display()))?;
        Ok(HostVolume {
            path: dir,
            read_only: true,
        })
    }

    /// A bound token for `pod`'s service account, from the cache or a new TokenRequest.
    /// Where this node keeps the local volumes r8s's provisioner makes (`<agent dir>/storage`,
    /// published on the Node as `r8s.io/local-path-dir`).
    pub fn local_volumes_dir(&self) -> PathBuf {
        self.root.parent().unwrap_or(&self.root).join("storage")
    }

    /// Keep the local volumes in step with their PersistentVolumes: a volume grown (its claim
    /// expanded) gets its file system grown; a volume that no longer exists (its claim was
    /// deleted and the class's reclaim policy is Delete) has its data removed: the directory
    /// (its file system unmounted first) and its image. Only entries named as the provisioner
    /// names them (`pvc-<uid>_<namespace>_<claim>`, and `….img`) are looked at, and only a
    /// definite "not found" removes one.
    pub async fn remove_deleted_local_volumes(&self) {
        let Ok(entries) = std::fs::read_dir(self.local_volumes_dir()) else {
            return;
        };
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(pv) = local_volume_name(&path) else {
                continue;
            };
            match api.get_opt(&pv).await {
                Ok(None) => {}
                Ok(Some(volume)) => {
                    // A volume still there: grown when its claim was (the pod's volumes are
                    // not set up again while it runs).
                    let bytes = volume
                        .spec
                        .as_ref()
                        .and_then(|s| s.capacity.as_ref())
                        .and_then(|c| c.get("storage"))
                        .and_then(|q| r8s_api::quantity::parse_value(&q.0).ok())
                        .unwrap_or(0);
                    if path.is_dir() && is_mount_point(&path) {
                        let dir = path.clone();
                        match tokio::task::spawn_blocking(move || grow_local_volume(&dir, bytes)).await {
                            Ok(Err(e)) => {
                                tracing::warn!(volume = %pv, error = %e, "kubelet: growing a local volume")
                            }
                            Err(e) => {
                                tracing::warn!(volume = %pv, error = %e, "kubelet: growing a local volume")
                            }
                            Ok(Ok(())) => {}
                        }
                    }
                    continue;
                }
                Err(_) => continue,
            }
            let removed = if path.is_dir() {
                if is_mount_point(&path) {
                    if let Err(e) = unmount(&path) {
                        tracing::warn!(volume = %pv, error = %e, "kubelet: unmounting a deleted local volume");
                        continue;
                    }
                }
                if !mounts_under(&path).is_empty() {
                    continue;
                }
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            match removed {
                Ok(()) => {
                    tracing::info!(volume = %pv, path = %path.display(), "kubelet: removed the data of a deleted local volume")
                }
                Err(e) => {
                    tracing::warn!(volume = %pv, error = %e, "kubelet: removing a deleted local volume's data")
                }
            }
        }
    }

    /// Unmount every local volume's file system (the agent stops and its pods are gone).
    pub fn unmount_local_volumes(&self) {
        let Ok(entries) = std::fs::read_dir(self.local_volumes_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && is_mount_point(&path) {
                if let Err(e) = unmount(&path) {
                    tracing::warn!(path = %path.display(), error = %e, "kubelet: unmounting a local volume");
                }
            }
        }
    }

    /// Where the volume bound to the claim `ns/name` is on this node, and whether it is
    /// read-only: the claim must be bound, and its volume one this node has (a host path or a
    /// local volume, of this node when the volume says which). `owner`: for an ephemeral
    /// volume, the pod that must own the claim.
    async fn claim_volume(
        &self,
        ns: &str,
        name: &str,
        owner: Option<&Pod>,
        user: Option<&str>,
        node: &NodeContext,
    ) -> Result<(PathBuf, bool), String> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        let pvc = match claims.get_opt(name).await {
            Ok(Some(c)) => c,
            Ok(None) => return Err(format!("persistentvolumeclaim \"{name}\" not found")),
            Err(e) => return Err(api_message(e)),
        };
        if let Some(pod) = owner {
            let owned = pvc
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| Some(&o.uid) == pod.metadata.uid.as_ref());
            if !owned {
                // Upstream's words (the volume manager's ephemeral volume check).
                return Err(format!(
                    "error processing PVC {ns}/{name}: PVC was not created for pod {ns}/{} (pod is not owner)",
                    pod.name_any()
                ));
            }
        }
        let phase = pvc
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let volume = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .unwrap_or_default();
        if phase != "Bound" || volume.is_empty() {
            // Upstream's words (the volume manager's desired-state populator).
            return Err(format!(
                "PVC {ns}/{name} has non-bound phase (\"{phase}\") or empty pvc.Spec.VolumeName (\"{volume}\")"
            ));
        }
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let pv = match volumes.get_opt(&volume).await {
            Ok(Some(v)) => v,
            Ok(None) => return Err(format!("persistentvolume \"{volume}\" not found")),
            Err(e) => return Err(api_message(e)),
        };
        let spec = pv.spec.unwrap_or_default();
        if !volume_on_node(spec.node_affinity.as_ref(), &node.node_name) {
            return Err(format!(
                "volume {volume} is not on node {}: node(s) had volume node affinity conflict",
                node.node_name
            ));
        }
        let read_only_modes = spec
            .access_modes
            .as_deref()
            .is_some_and(|m| !m.is_empty() && m.iter().all(|m| m == "ReadOnlyMany"));
        if let Some(hp) = &spec.host_path {
            let path = PathBuf::from(&hp.path);
            let ours = pv
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("pv.kubernetes.io/provisioned-by"))
                .is_some_and(|p| p == r8s_api::local_path::PROVISIONER);
            if ours && path.parent() == Some(self.local_volumes_dir().as_path()) {
                // r8s's local provisioner: the size is enforced by a file system of that size.
                let bytes = spec
                    .capacity
                    .as_ref()
                    .and_then(|c| c.get("storage"))
                    .and_then(|q| r8s_api::quantity::parse_value(&q.0).ok())
                    .unwrap_or(0);
                let dir = path.clone();
                if self.mounts {
                    tokio::task::spawn_blocking(move || ensure_local_volume(&dir, bytes))
                        .await
                        .map_err(|e| e.to_string())??;
                } else {
                    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
                }
                if let Some(pod) = user {
                    self.local_users
                        .lock()
                        .unwrap()
                        .entry(path.clone())
                        .or_default()
                        .insert(pod.to_owned());
                }
                return Ok((path, read_only_modes));
            }
            check_host_path(&path, hp.type_.as_deref().unwrap_or(""))?;
            return Ok((path, read_only_modes));
        }
        if let Some(local) = &spec.local {
            let path = PathBuf::from(&local.path);
            if !path.exists() {
                return Err(format!("path \"{}\" does not exist", local.path));
            }
            return Ok((path, read_only_modes));
        }
        Err(format!(
            "persistentvolume \"{volume}\": only hostPath and local volumes can be mounted on this node"
        ))
    }

    async fn token(&self, pod: &Pod, audience: &str, expiration: i64) -> Result<String, String> {
        let uid = pod.uid().unwrap_or_default();
        let ns = pod.namespace().unwrap_or_default();
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let key = (uid.clone(), sa.clone(), audience.to_string(), expiration);
        if let Some(t) = self.tokens.lock().unwrap().get(&key) {
            if std::time::SystemTime::now() < t.refresh_at {
                return Ok(t.token.clone());
            }
        }
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: if audience.is_empty() {
                    Vec::new()
                } else {
                    vec![audience.to_string()]
                },
                expiration_seconds: Some(expiration),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: Some(uid.clone()),
                }),
            },
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &ns);
        let issued = std::time::SystemTime::now();
        let resp: TokenRequest = api
            .create_subresource("token", &sa, &PostParams::default(), &req)
            .await
            .map_err(|e| format!("failed to fetch token: {}", api_message(e)))?;
        let status = resp
            .status
            .ok_or("failed to fetch token: no status in the TokenRequest")?;
        let ttl = resp.spec.expiration_seconds.unwrap_or(expiration).max(1) as u64;
        let expires = std::time::UNIX_EPOCH
            + Duration::from_secs(status.expiration_timestamp.0.as_second().max(0) as u64);
        let refresh_at = (expires - Duration::from_secs(ttl / 5)).min(issued + TOKEN_MAX_AGE);
        self.tokens.lock().unwrap().insert(
            key,
            Token {
                token: status.token.clone(),
                refresh_at,
            },
        );
        Ok(status.token)
    }

    /// The local volumes mounted here for pods, as the node's status names them (upstream's
    /// unique volume name, `<plugin>/<volume>`: `r8s.io/local-path/<pv>`), each with the loop
    /// device it is attached as (empty where the volume is a plain directory), sorted.
    pub fn local_volumes_in_use(&self) -> Vec<(String, String)> {
        let dirs: Vec<PathBuf> = self.local_users.lock().unwrap().keys().cloned().collect();
        if dirs.is_empty() {
            return Vec::new();
        }
        let mut sources = mount_sources();
        let mut out: Vec<(String, String)> = dirs
            .iter()
            .filter_map(|dir| {
                let pv = local_volume_name(dir)?;
                let device = sources
                    .remove(dir)
                    .filter(|d| d.starts_with("/dev/loop"))
                    .unwrap_or_default();
                Some((format!("{}/{pv}", r8s_api::local_path::PROVISIONER), device))
            })
            .collect();
        out.sort();
        out
    }

    /// Unmount and remove everything of pod `uid`.
    pub fn teardown(&self, uid: &str) -> io::Result<()> {
        // Local volumes no pod uses any more are unmounted (mounted again, from their image,
        // for the next pod: where the file system grows if its claim did meanwhile).
        let unused: Vec<PathBuf> = {
            let mut users = self.local_users.lock().unwrap();
            for pods in users.values_mut() {
                pods.remove(uid);
            }
            let unused = users
                .iter()
                .filter(|(_, pods)| pods.is_empty())
                .map(|(p, _)| p.clone())
                .collect();
            users.retain(|_, pods| !pods.is_empty());
            unused
        };
        for path in unused {
            if is_mount_point(&path) {
                if let Err(e) = unmount(&path) {
                    tracing::warn!(path = %path.display(), error = %e, "kubelet: unmounting an unused local volume");
                }
            }
        }
        self.tokens.lock().unwrap().retain(|k, _| k.0 != uid);
        self.ready.lock().unwrap().retain(|k| k.0 != uid);
        let dir = self.pod_dir(uid);
        if !dir.exists() {
            return Ok(());
        }
        if self.mounts {
            for m in mounts_under(&dir) {
                unmount(Path::new(&m))?;
            }
        }
        std::fs::remove_dir_all(&dir)
    }
}

fn api_message(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message,
        e => e.to_string(),
    }
}

fn lookup<T>(r: Result<Option<T>, kube::Error>, kind: &str, name: &str) -> Lookup<Arc<T>> {
    match r {
        Ok(Some(v)) => Lookup::Found(Arc::new(v)),
        Ok(None) => Lookup::NotFound,
        Err(e) => Lookup::Failed(format!("couldn't get {kind} {name}: {}", api_message(e))),
    }
}

fn mode_or(mode: Option<i32>) -> u32 {
    mode.map(|m| m as u32 & 0o7777).unwrap_or(DEFAULT_MODE)
}

/// The sum of the containers' memory limits, when every container has one.
fn pod_memory_limit(pod: &Pod) -> Option<i128> {
    let spec = pod.spec.as_ref()?;
    let mut total = 0;
    for c in &spec.containers {
        let q = c.resources.as_ref()?.limits.as_ref()?.get("memory")?;
        total += r8s_api::quantity::parse_value(&q.0).ok()?;
    }
    Some(total)
}

/// Files for `data` (all keys, or `items`), upstream's `MakePayload`. `what` names the kind in
/// the error for a missing key.
fn key_payload(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
    missing: impl Fn(&str) -> String,
) -> Result<Payload, String> {
    let default_mode = mode_or(default_mode);
    let mut payload = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                payload.insert(
                    k.clone(),
                    FileProjection {
                        data: v.clone(),
                        mode: default_mode,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let Some(v) = data.get(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(missing(&item.key));
                };
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data: v.clone(),
                        mode: item.mode.map(|m| m as u32 & 0o7777).unwrap_or(default_mode),
                    },
                );
            }
        }
    }
    Ok(payload)
}

/// The files of a configMap volume (data and binaryData).
pub fn config_map_payload(
    cm: &ConfigMap,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
) -> Result<Payload, String> {
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    data.extend(
        cm.binary_data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone())),
    );
    key_payload(&data, items, default_mode, optional, |k| {
        format!("configmap references non-existent config key: {k}")
    })
}

/// The files of a secret volume.
pub fn secret_payload(
    s: &Secret,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
) -> Result<Payload, String> {
    let data: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    key_payload(&data, items, default_mode, optional, |k| {
        format!("references non-existent secret key: {k}")
    })
}

/// The files of a downwardAPI volume (or projected source).
pub fn downward_api_payload(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
    node: &NodeContext,
) -> Result<Payload, String> {
    let default_mode = mode_or(default_mode);
    let mut payload = Payload::new();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            spec::volume_field_value(pod, &f.field_path)
                .ok_or_else(|| format!("unsupported fieldPath: {}", f.field_path))?
        } else if let Some(r) = &item.resource_field_ref {
            let name = r.container_name.clone().unwrap_or_default();
            let spec = pod.spec.clone().unwrap_or_default();
            let c = spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .find(|c| c.name == name)
                .ok_or_else(|| format!("container {name} not found"))?;
            spec::resource_value(&r.resource, r.divisor.as_ref().map(|d| d.0.as_str()), c, node)?
        } else {
            continue;
        };
        payload.insert(
            item.path.clone(),
            FileProjection {
                data: value.into_bytes(),
                mode: item.mode.map(|m| m as u32 & 0o7777).unwrap_or(default_mode),
            },
        );
    }
    Ok(payload)
}

/// The smallest file system a local volume gets (ext4 needs room for its own structures).
const MIN_LOCAL_VOLUME_BYTES: i128 = 16 << 20;

/// A local volume of `bytes` at `dir`: an ext4 file system in the image `<dir>.img` (sparse:
/// it takes the room it is written), mounted through a loop device at `dir`, so that a
/// container writing past the claim's size gets "No space left on device". Made on first use;
/// mounted again from its image after the agent restarts. Without the tools to make one
/// (`mkfs.ext4`), or with no size, a plain directory, the size not enforced (logged).
pub fn ensure_local_volume(dir: &Path, bytes: i128) -> Result<(), String> {
    if is_mount_point(dir) {
        return grow_local_volume(dir, bytes);
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let image = PathBuf::from(format!("{}.img", dir.display()));
    let open_dir = || {
        // As local-path-provisioner: any container user may write the volume.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
            .map_err(|e| format!("making {} writable: {e}", dir.display()))
    };
    if bytes <= 0 {
        return open_dir();
    }
    if !image.exists() {
        let partial = PathBuf::from(format!("{}.img.partial", dir.display()));
        let file =
            std::fs::File::create(&partial).map_err(|e| format!("creating {}: {e}", partial.display()))?;
        file.set_len(bytes.max(MIN_LOCAL_VOLUME_BYTES) as u64)
            .map_err(|e| format!("sizing {}: {e}", partial.display()))?;
        drop(file);
        // No blocks reserved for root: the claim's size is what the pod gets (less ext4's own).
        match std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0"])
            .arg(&partial)
            .output()
        {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                let _ = std::fs::remove_file(&partial);
                return Err(format!(
                    "making the file system of {}: {}",
                    dir.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                tracing::warn!(path = %dir.display(), error = %e, "kubelet: no mkfs.ext4: the local volume's size is not enforced");
                return open_dir();
            }
        }
        std::fs::rename(&partial, &image).map_err(|e| format!("naming {}: {e}", image.display()))?;
    }
    // Grown while unmounted (its claim expanded while no pod used it, or online resizing was
    // refused): the image and its file system are grown before the mount.
    let pending = resize_pending(&image);
    if pending.exists() || std::fs::metadata(&image).is_ok_and(|m| (m.len() as i128) < bytes) {
        grow_image_offline(&image, bytes)?;
        let _ = std::fs::remove_file(&pending);
    }
    let out = std::process::Command::new("mount")
        .args(["-t", "ext4", "-o", "loop"])
        .arg(&image)
        .arg(dir)
        .output()
        .map_err(|e| format!("mounting {}: {e}", dir.display()))?;
    if !out.status.success() {
        return Err(format!(
            "mounting {} at {}: {}",
            image.display(),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // Direct I/O between the loop device and its image: the data is cached once (by the
    // volume's file system) instead of twice, and a write in the volume runs at the speed of
    // the same write to the node's disk (BENCHMARKS.md). Where the image's file system refuses
    // O_DIRECT the volume still works, through the page cache.
    if let Some(device) = mount_sources().remove(dir) {
        if let Err(e) = run_tool("losetup", &["--direct-io=on", &device]) {
            tracing::debug!(path = %dir.display(), error = %e, "kubelet: a local volume without direct I/O");
        }
    }
    open_dir()
}

/// The PersistentVolume a local volume's directory (or its image, or its resize marker) is
/// the data of, from the name the provisioner gives it: `pvc-<uid>_<namespace>_<claim>`.
fn local_volume_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_string_lossy();
    let base = name
        .strip_suffix(".img.resize-pending")
        .or_else(|| name.strip_suffix(".img"))
        .unwrap_or(&name);
    let mut parts = base.split('_');
    let pv = parts.next().filter(|p| p.starts_with("pvc-"))?;
    (parts.count() >= 2).then(|| pv.to_owned())
}

/// What each mount point of this process's mount namespace is mounted from (a local volume:
/// its loop device).
fn mount_sources() -> HashMap<PathBuf, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mountinfo
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            let target = unescape_mount_path(fields.get(4)?);
            Some((PathBuf::from(target), fields.get(sep + 2)?.to_string()))
        })
        .collect()
}

/// A path as /proc/self/mountinfo writes it: space, tab, newline and backslash as `\ooo`.
fn unescape_mount_path(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 4).and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(c as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Run `cmd args`: its stderr as the error when it fails.
fn run_tool(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The marker of an image grown whose file system could not be grown online.
fn resize_pending(image: &Path) -> PathBuf {
    PathBuf::from(format!("{}.resize-pending", image.display()))
}

/// An unmounted local volume's image grown to `bytes` with its file system (`e2fsck`, then
/// `resize2fs` of the image).
fn grow_image_offline(image: &Path, bytes: i128) -> Result<(), String> {
    let len = std::fs::metadata(image).map(|m| m.len() as i128).unwrap_or(0);
    std::fs::OpenOptions::new()
        .write(true)
        .open(image)
        .and_then(|f| f.set_len(bytes.max(len) as u64))
        .map_err(|e| format!("growing {}: {e}", image.display()))?;
    let path = image.to_string_lossy();
    // e2fsck exits 1 when it fixed something: only 4 and above are failures.
    let fsck = std::process::Command::new("e2fsck")
        .args(["-f", "-y", &path])
        .output()
        .map_err(|e| format!("e2fsck: {e}"))?;
    if fsck.status.code().unwrap_or(8) >= 4 {
        return Err(format!(
            "e2fsck {path}: {}",
            String::from_utf8_lossy(&fsck.stderr).trim()
        ));
    }
    run_tool("resize2fs", &[&path])?;
    tracing::info!(image = %path, bytes, "kubelet: grew a local volume's file system (offline)");
    Ok(())
}

/// A mounted local volume whose claim now asks for more than its image holds: the image grown
/// (sparse), the loop device told, and the ext4 file system grown online (`resize2fs`). Where
/// online resizing is refused (it needs CAP_SYS_RESOURCE), the file system grows at its next
/// mount, as upstream's offline expansion does.
fn grow_local_volume(dir: &Path, bytes: i128) -> Result<(), String> {
    let image = PathBuf::from(format!("{}.img", dir.display()));
    let Ok(meta) = std::fs::metadata(&image) else {
        return Ok(());
    };
    if bytes <= meta.len() as i128 {
        return Ok(());
    }
    let Some(device) = mount_sources().remove(dir) else {
        return Ok(());
    };
    let pending = resize_pending(&image);
    if pending.exists() {
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .and_then(|f| f.set_len(bytes as u64))
        .map_err(|e| format!("growing {}: {e}", image.display()))?;
    run_tool("losetup", &["-c", &device])?;
    if let Err(e) = run_tool("resize2fs", &[&device]) {
        // Refused online (no CAP_SYS_RESOURCE): grown at the next mount.
        std::fs::write(&pending, b"").map_err(|e| e.to_string())?;
        tracing::info!(path = %dir.display(), error = %e, "kubelet: a local volume's file system grows when it is next mounted");
        return Ok(());
    }
    tracing::info!(path = %dir.display(), bytes, "kubelet: grew a local volume's file system");
    Ok(())
}

/// Whether a volume with `affinity` may be used on `node`: as far as the kubelet can tell
/// without the node's labels, a required term naming hostnames (`kubernetes.io/hostname In
/// [...]`, what local volumes carry) must name this one; anything else is the scheduler's to
/// check.
pub fn volume_on_node(affinity: Option<&k8s_openapi::api::core::v1::VolumeNodeAffinity>, node: &str) -> bool {
    let Some(terms) = affinity
        .and_then(|a| a.required.as_ref())
        .map(|r| &r.node_selector_terms)
    else {
        return true;
    };
    let hostnames = |t: &k8s_openapi::api::core::v1::NodeSelectorTerm| -> Option<Vec<String>> {
        t.match_expressions
            .iter()
            .flatten()
            .find(|e| e.key == "kubernetes.io/hostname" && e.operator == "In")
            .map(|e| e.values.clone().unwrap_or_default())
    };
    if terms.is_empty() || terms.iter().any(|t| hostnames(t).is_none()) {
        return true;
    }
    terms
        .iter()
        .any(|t| hostnames(t).is_some_and(|h| h.iter().any(|n| n == node)))
}

/// Upstream's hostPath `type` checks; the `…OrCreate` types create what is missing.
pub fn check_host_path(path: &Path, type_: &str) -> Result<(), String> {
    let p = path.display();
    let meta = std::fs::metadata(path);
    let ft = meta.as_ref().ok().map(|m| m.file_type());
    let ok = match type_ {
        "" => true,
        "DirectoryOrCreate" if ft.is_none() => {
            std::fs::create_dir_all(path).map_err(|e| format!("mkdir {p}: {e}"))?;
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755));
            true
        }
        "DirectoryOrCreate" | "Directory" => ft.is_some_and(|t| t.is_dir()),
        "FileOrCreate" if ft.is_none() => {
            // As upstream, the parent directory is not created.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| format!("open {p}: {e}"))?;
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644));
            true
        }
        "FileOrCreate" | "File" => ft.is_some_and(|t| t.is_file()),
        "Socket" => ft.is_some_and(|t| t.is_socket()),
        "CharDevice" => ft.is_some_and(|t| t.is_char_device()),
        "BlockDevice" => ft.is_some_and(|t| t.is_block_device()),
        other => return Err(format!("{other} is an invalid volume type")),
    };
    if ok {
        return Ok(());
    }
    let what = match type_ {
        "DirectoryOrCreate" | "Directory" => "a directory",
        "FileOrCreate" | "File" => "a file",
        "Socket" => "a socket file",
        "CharDevice" => "a character device",
        _ => "a block device",
    };
    Err(format!("hostPath type check failed: {p} is not {what}"))
}

/// A payload path must stay inside the volume (upstream `validatePath`).
fn validate_path(p: &str) -> io::Result<()> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("invalid path {p:?}: {why}"));
    if p.is_empty() {
        return Err(bad("empty"));
    }
    if p.starts_with('/') {
        return Err(bad("must be relative"));
    }
    if p.starts_with("..") {
        return Err(bad("must not start with '..'"));
    }
    if Path::new(p).components().any(|c| c == Component::ParentDir) {
        return Err(bad("must not contain '..'"));
    }
    Ok(())
}

fn top_level(p: &str) -> &str {
    p.split('/').next().unwrap_or(p)
}

/// Every regular file under `dir`, by path relative to it.
fn read_tree(dir: &Path) -> io::Result<Payload> {
    let mut out = Payload::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, prefix)) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let name = format!("{prefix}{}", e.file_name().to_string_lossy());
            let meta = e.metadata()?;
            if meta.is_dir() {
                stack.push((e.path(), format!("{name}/")));
            } else {
                out.insert(
                    name,
                    FileProjection {
                        data: std::fs::read(e.path())?,
                        mode: meta.permissions().mode() & 0o7777,
                    },
                );
            }
        }
    }
    Ok(out)
}

static TS_COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Write `payload` into `dir` as upstream's AtomicWriter: a new `..<timestamp>` directory, the
/// `..data` symlink renamed onto it, one symlink per top-level name into `..data`; then the
/// old version and names no longer in the payload go. Nothing is written when `dir` already
/// holds exactly this payload. Returns whether it wrote.
pub fn write_atomically(dir: &Path, payload: &Payload) -> io::Result<bool> {
    for p in payload.keys() {
        validate_path(p)?;
    }
    std::fs::create_dir_all(dir)?;
    let data_link = dir.join(DATA_DIR);
    let old = std::fs::read_link(&data_link).ok();
    let tops: BTreeSet<&str> = payload.keys().map(|p| top_level(p)).collect();
    let entries = || -> io::Result<BTreeSet<String>> {
        Ok(std::fs::read_dir(dir)?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| !n.starts_with(".."))
            .collect())
    };
    if let Some(old) = &old {
        let same = read_tree(&dir.join(old)).is_ok_and(|t| &t == payload);
        let visible = entries()?;
        if same && visible.iter().map(String::as_str).eq(tops.iter().copied()) {
            return Ok(false);
        }
    }
    let n = TS_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let now = jiff::Timestamp::now();
    let ts_name = format!(
        "..{}.{}{n}",
        now.strftime("%Y_%m_%d_%H_%M_%S"),
        now.subsec_nanosecond()
    );
    let ts_dir = dir.join(&ts_name);
    std::fs::create_dir(&ts_dir)?;
    std::fs::set_permissions(&ts_dir, std::fs::Permissions::from_mode(0o755))?;
    for (p, f) in payload {
        let file = ts_dir.join(p);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file, &f.data)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(f.mode))?;
    }
    let tmp = dir.join(DATA_DIR_TMP);
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&ts_name, &tmp)?;
    std::fs::rename(&tmp, &data_link)?;
    for t in &tops {
        let link = dir.join(t);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA_DIR).join(t), &link)?;
        }
    }
    if let Some(old) = old.filter(|o| o.as_os_str() != ts_name.as_str()) {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    for name in entries()? {
        if !tops.contains(name.as_str()) {
            let p = dir.join(&name);
            let is_dir = std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir());
            if is_dir {
                std::fs::remove_dir_all(&p)?;
            } else {
                std::fs::remove_file(&p)?;
            }
        }
    }
    Ok(true)
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Give a volume to the pod's fsGroup (upstream `SetVolumeOwnership`): every file and directory
/// gets the group and group read (and write, unless the volume is read-only) permission;
/// directories also get the setgid bit and group search, so what containers make there
/// belongs to the group too. Symlinks are re-owned, never followed. With
/// `fsGroupChangePolicy: OnRootMismatch` nothing is done when the root already matches.
pub fn set_volume_ownership(root: &Path, gid: u32, read_only: bool, policy: Option<&str>) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(root)?;
    let mask = if read_only { 0o440 } else { 0o660 };
    if policy == Some("OnRootMismatch")
        && meta.gid() == gid
        && meta.mode() & 0o2000 != 0
        && meta.mode() & mask == mask
    {
        return Ok(());
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p)?;
        std::os::unix::fs::lchown(&p, None, Some(gid))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let mut mode = meta.mode() & 0o7777 | mask;
        if meta.is_dir() {
            mode |= 0o2000 | 0o110;
            for e in std::fs::read_dir(&p)? {
                stack.push(e?.path());
            }
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Mount a tmpfs at `dir` (of `size` bytes, else the kernel's default).
pub fn mount_tmpfs(dir: &Path, size: Option<i128>) -> io::Result<()> {
    let target = c_path(dir)?;
    let fstype = CString::new("tmpfs").unwrap_or_default();
    let data = CString::new(size.map(|s| format!("size={s}")).unwrap_or_default()).unwrap_or_default();
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Detach the mount at `dir`.
pub fn unmount(dir: &Path) -> io::Result<()> {
    let target = c_path(dir)?;
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) && e.raw_os_error() != Some(libc::ENOENT) {
            return Err(e);
        }
    }
    Ok(())
}

/// The mount points at or under `dir`, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = dir.to_string_lossy().trim_end_matches('/').to_string();
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| p == &prefix || p.starts_with(&format!("{prefix}/")))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points.dedup();
    points
}

/// Whether something is mounted at `dir`. Every sync asks it of every secret and projected
/// volume, so it is one `statx` (its mount-root attribute, Linux 5.8) rather than a reading of
/// the mount table, which grows with the pods (three mounts each) and made a resync's cost grow
/// with the square of them; the mount table answers where the kernel cannot.
pub fn is_mount_point(dir: &Path) -> bool {
    mount_root(dir).unwrap_or_else(|| {
        let d = dir.to_string_lossy();
        mounts_under(dir)
            .iter()
            .any(|m| m.as_str() == d.trim_end_matches('/'))
    })
}

/// `statx`'s answer to "is `dir` the root of a mount", where the kernel gives one.
fn mount_root(dir: &Path) -> Option<bool> {
    let path = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statx` fills the zeroed struct it is given; the path is NUL-terminated.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT,
            0,
            &mut st,
        )
    };
    if r != 0 {
        // Nothing there is nothing mounted; other errors: ask the mount table.
        return (io::Error::last_os_error().kind() == io::ErrorKind::NotFound).then_some(false);
    }
    let bit = libc::STATX_ATTR_MOUNT_ROOT as u64;
    (st.stx_attributes_mask & bit != 0).then_some(st.stx_attributes & bit != 0)
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn configmaps_and_secrets_serve_as_long_as_the_nodes_ttl_says_never_less_than_five_seconds() {
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let vm = VolumeManager::new(std::env::temp_dir().join("r8s-unused"), client);
        assert_eq!(vm.object_ttl(), OBJECT_TTL);
        vm.set_object_ttl(Some("300"));
        assert_eq!(vm.object_ttl(), Duration::from_secs(300));
        for short in [Some("0"), Some("3"), Some("soon"), None] {
            vm.set_object_ttl(short);
            assert_eq!(vm.object_ttl(), OBJECT_TTL, "{short:?}");
        }
    }

    use super::*;
    use serde_json::json;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
        }
    }

    fn names(dir: &Path) -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect()
    }

    #[test]
    fn atomic_writer_swaps_versions_through_the_data_link() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        let v1 = Payload::from([
            ("a".to_string(), file("one", 0o644)),
            ("sub/b".to_string(), file("two", 0o600)),
        ]);
        assert!(write_atomically(&dir, &v1).unwrap());
        let first = std::fs::read_link(dir.join(DATA_DIR)).unwrap();
        assert!(first.to_string_lossy().starts_with("..20"), "{first:?}");
        assert_eq!(std::fs::read_link(dir.join("a")).unwrap(), Path::new("..data/a"));
        assert_eq!(
            std::fs::read_link(dir.join("sub")).unwrap(),
            Path::new("..data/sub")
        );
        assert_eq!(std::fs::read_to_string(dir.join("sub/b")).unwrap(), "two");
        let mode = |p: &str| std::fs::metadata(dir.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!((mode("a"), mode("sub/b")), (0o644, 0o600));

        // The same payload again: nothing written.
        assert!(!write_atomically(&dir, &v1).unwrap());
        assert_eq!(std::fs::read_link(dir.join(DATA_DIR)).unwrap(), first);

        // A new version: a new timestamped dir, the old one and the dropped name gone.
        let v2 = Payload::from([
            ("a".to_string(), file("uno", 0o644)),
            ("c".to_string(), file("three", 0o400)),
        ]);
        assert!(write_atomically(&dir, &v2).unwrap());
        let second = std::fs::read_link(dir.join(DATA_DIR)).unwrap();
        assert_ne!(first, second);
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "uno");
        assert_eq!(std::fs::read_to_string(dir.join("c")).unwrap(), "three");
        assert_eq!(mode("c"), 0o400);
        let all = names(&dir);
        let expected: BTreeSet<String> = [
            "..data".to_string(),
            second.to_string_lossy().to_string(),
            "a".into(),
            "c".into(),
        ]
        .into();
        assert_eq!(all, expected);

        // A changed mode alone is a change.
        let v3 = Payload::from([
            ("a".to_string(), file("uno", 0o640)),
            ("c".to_string(), file("three", 0o400)),
        ]);
        assert!(write_atomically(&dir, &v3).unwrap());
        assert_eq!(mode("a"), 0o640);
    }

    #[test]
    fn atomic_writer_refuses_paths_that_leave_the_volume() {
        let tmp = tempfile::tempdir().unwrap();
        for bad in ["/etc/passwd", "../x", "a/../../x", "..data", ""] {
            let p = Payload::from([(bad.to_string(), file("x", 0o644))]);
            assert!(write_atomically(tmp.path(), &p).is_err(), "{bad}");
        }
    }

    fn cm() -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "cfg", "namespace": "ns"},
            "data": {"a": "1", "b": "2"},
            "binaryData": {"bin": "AAE="}
        }))
        .unwrap()
    }

    #[test]
    fn config_map_items_modes_and_optional_keys() {
        let all = config_map_payload(&cm(), None, None, false).unwrap();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["a", "b", "bin"]);
        assert_eq!(all["bin"].data, vec![0, 1]);
        assert!(all.values().all(|f| f.mode == 0o644));
        let items: Vec<KeyToPath> = serde_json::from_value(json!([
            {"key": "a", "path": "dir/first"},
            {"key": "b", "path": "second", "mode": 0o400}
        ]))
        .unwrap();
        let some = config_map_payload(&cm(), Some(&items), Some(0o440), false).unwrap();
        assert_eq!(some.len(), 2);
        assert_eq!(some["dir/first"], file("1", 0o440));
        assert_eq!(some["second"], file("2", 0o400));
        let missing: Vec<KeyToPath> = serde_json::from_value(json!([{"key": "zz", "path": "z"}])).unwrap();
        assert_eq!(
            config_map_payload(&cm(), Some(&missing), None, false).unwrap_err(),
            "configmap references non-existent config key: zz"
        );
        assert!(config_map_payload(&cm(), Some(&missing), None, true)
            .unwrap()
            .is_empty());
        let s: Secret = serde_json::from_value(json!({"data": {"k": "c2VjcmV0"}})).unwrap();
        assert_eq!(
            secret_payload(&s, None, Some(0o400), false).unwrap()["k"],
            file("secret", 0o400)
        );
        assert_eq!(
            secret_payload(&s, Some(&missing), None, false).unwrap_err(),
            "references non-existent secret key: zz"
        );
    }

    #[test]
    fn lookups_give_upstreams_messages() {
        let l: Lookup<u8> = Lookup::NotFound;
        assert_eq!(
            l.required("configmap", "x", false).unwrap_err(),
            "configmap \"x\" not found"
        );
        assert!(l.required("configmap", "x", true).unwrap().is_none());
    }

    #[test]
    fn downward_api_files() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                "labels": {"app": "web", "tier": "front"}, "annotations": {"note": "say \"hi\""}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "64Mi", "cpu": "250m"}}}]}
        }))
        .unwrap();
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(json!([
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}, "mode": 0o400},
            {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
            {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
            {"path": "mem", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}},
            {"path": "cpu", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"}}
        ]))
        .unwrap();
        let node = NodeContext::default();
        let p = downward_api_payload(&pod, &items, None, &node).unwrap();
        let s = |k: &str| String::from_utf8(p[k].data.clone()).unwrap();
        assert_eq!(s("name"), "p");
        assert_eq!(s("labels"), "app=\"web\"\ntier=\"front\"");
        assert_eq!(p["labels"].mode, 0o400);
        assert_eq!(p["name"].mode, 0o644);
        assert_eq!(s("annotations"), "note=\"say \\\"hi\\\"\"");
        assert_eq!(s("app"), "web");
        assert_eq!(s("mem"), "64");
        assert_eq!(s("cpu"), "250");
    }

    #[test]
    fn local_volumes_are_on_the_nodes_their_affinity_names() {
        let affinity = |hosts: &[&str]| -> k8s_openapi::api::core::v1::VolumeNodeAffinity {
            serde_json::from_value(serde_json::json!({"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}]}
            ]}}))
            .unwrap()
        };
        assert!(volume_on_node(None, "a"));
        assert!(volume_on_node(Some(&affinity(&["a", "b"])), "b"));
        assert!(!volume_on_node(Some(&affinity(&["a"])), "b"));
        // Other terms are the scheduler's to judge.
        let zone: k8s_openapi::api::core::v1::VolumeNodeAffinity = serde_json::from_value(serde_json::json!(
            {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]}]}}
        ))
        .unwrap();
        assert!(volume_on_node(Some(&zone), "b"));
    }

    #[test]
    fn host_path_types_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("d");
        let f = tmp.path().join("f");
        assert_eq!(
            check_host_path(&d, "Directory").unwrap_err(),
            format!("hostPath type check failed: {} is not a directory", d.display())
        );
        check_host_path(&d, "DirectoryOrCreate").unwrap();
        assert!(d.is_dir());
        check_host_path(&d, "Directory").unwrap();
        check_host_path(&f, "FileOrCreate").unwrap();
        assert!(f.is_file());
        check_host_path(&f, "File").unwrap();
        assert!(check_host_path(&d, "File")
            .unwrap_err()
            .ends_with("is not a file"));
        assert!(check_host_path(&f, "Directory").is_err());
        assert!(check_host_path(&f, "Socket")
            .unwrap_err()
            .ends_with("is not a socket file"));
        assert!(check_host_path(Path::new("/dev/null"), "CharDevice").is_ok());
        assert!(check_host_path(Path::new("/dev/null"), "BlockDevice")
            .unwrap_err()
            .ends_with("is not a block device"));
        // FileOrCreate does not make the parent.
        assert!(check_host_path(&tmp.path().join("no/such"), "FileOrCreate").is_err());
        check_host_path(&tmp.path().join("anything"), "").unwrap();
        assert_eq!(
            check_host_path(&d, "Weird").unwrap_err(),
            "Weird is an invalid volume type"
        );
    }

    #[test]
    fn local_volume_data_is_named_after_its_persistent_volume() {
        let name = |p: &str| local_volume_name(Path::new(p));
        let pv = "pvc-0a1b2c3d-0000-4000-8000-000000000001";
        for entry in [
            format!("/var/lib/r8s/agent/storage/{pv}_default_data"),
            format!("/x/{pv}_default_data.img"),
            format!("/x/{pv}_ns_my_claim.img.resize-pending"),
        ] {
            assert_eq!(name(&entry).as_deref(), Some(pv), "{entry}");
        }
        // Not the provisioner's: left alone.
        assert_eq!(name("/x/lost+found"), None);
        assert_eq!(name(&format!("/x/{pv}")), None);
        assert_eq!(name("/x/data_default_claim"), None);
    }

    #[test]
    fn mount_table_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/a\\040b\\011c"), "/a b\tc");
        assert_eq!(unescape_mount_path("/plain/path"), "/plain/path");
        assert_eq!(unescape_mount_path("/back\\134slash"), "/back\\slash");
        assert_eq!(unescape_mount_path("/odd\\x"), "/odd\\x");
    }

    #[test]
    fn fs_group_owns_the_volume() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("vol");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/file"), "x").unwrap();
        std::fs::set_permissions(root.join("sub/file"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("link")).unwrap();
        set_volume_ownership(&root, 4242, false, None).unwrap();
        let m = |p: &str| std::fs::symlink_metadata(root.join(p)).unwrap();
        assert_eq!(m("sub/file").gid(), 4242);
        assert_eq!(m("sub/file").mode() & 0o777, 0o660);
        assert_eq!(m("sub").mode() & 0o2070, 0o2070);
        assert_eq!(m("").gid(), 4242);
        // The link is re-owned, its target left alone.
        assert_eq!(m("link").gid(), 4242);
        assert_ne!(std::fs::metadata("/etc/hostname").unwrap().gid(), 4242);
        // Read-only volumes get group read only.
        std::fs::write(root.join("ro"), "y").unwrap();
        std::fs::set_permissions(root.join("ro"), std::fs::Permissions::from_mode(0o600)).unwrap();
        set_volume_ownership(&root, 4243, true, None).unwrap();
        assert_eq!(m("ro").mode() & 0o777, 0o640);
        // OnRootMismatch: a matching root means nothing changes below it.
        std::fs::write(root.join("new"), "z").unwrap();
        std::fs::set_permissions(root.join("new"), std::fs::Permissions::from_mode(0o600)).unwrap();
        set_volume_ownership(&root, 4243, true, Some("OnRootMismatch")).unwrap();
        assert_eq!(m("new").mode() & 0o777, 0o600);
        // Another group is a mismatch: everything is changed.
        set_volume_ownership(&root, 4244, true, Some("OnRootMismatch")).unwrap();
        assert_eq!((m("new").gid(), m("new").mode() & 0o777), (4244, 0o640));
    }

    #[test]
    fn tmpfs_mounts_are_found_and_removed() {
        // Mounting needs CAP_SYS_ADMIN; skip where it is not there.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("mem");
        std::fs::create_dir_all(&dir).unwrap();
        if mount_tmpfs(&dir, Some(1 << 20)).is_err() {
            return;
        }
        assert!(is_mount_point(&dir));
        assert!(!is_mount_point(tmp.path()));
        // The kernel's answer, not the mount table's, on this machine's kernel.
        assert_eq!(mount_root(&dir), Some(true));
        assert_eq!(mount_root(tmp.path()), Some(false));
        assert_eq!(mount_root(&tmp.path().join("missing")), Some(false));
        assert_eq!(mounts_under(tmp.path()), [dir.to_string_lossy().to_string()]);
        unmount(&dir).unwrap();
        assert!(!is_mount_point(&dir));
    }
}
