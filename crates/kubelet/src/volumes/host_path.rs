//! hostPath volumes: a path on the host mounted as it is, after upstream's `type` checks
//! (`DirectoryOrCreate` and `FileOrCreate` create what is missing, 0755 and 0644; the other
//! types require what they name to be there) with upstream's messages.

use std::path::Path;

use super::host::{FileKind, HostOps};

/// Checks (and creates) the host path as its `type` says. A path that cannot be examined
/// (below a regular file, not searchable) counts as missing, as upstream's type checker's
/// `Exists` has it: `…OrCreate` then fails to create it with the reason.
pub fn set_up(path: &Path, type_: Option<&str>, host: &dyn HostOps) -> Result<(), String> {
    let kind = host.file_kind(path).unwrap_or(None);
    let shown = path.display();
    let is = |want: FileKind| kind == Some(want);
    let fail = |what: &str| Err(format!("hostPath type check failed: {shown} is not {what}"));
    match type_.unwrap_or("") {
        "" => Ok(()),
        "DirectoryOrCreate" if kind.is_none() => {
            host.create_dir_all(path, 0o755).map_err(|e| e.to_string())
        }
        "DirectoryOrCreate" | "Directory" if !is(FileKind::Directory) => fail("a directory"),
        "FileOrCreate" if kind.is_none() => {
            host.create_file(path, 0o644).map_err(|e| e.to_string())
        }
        "FileOrCreate" | "File" if !is(FileKind::File) => fail("a file"),
        "Socket" if !is(FileKind::Socket) => fail("a socket file"),
        "CharDevice" if !is(FileKind::CharDevice) => fail("a character device"),
        "BlockDevice" if !is(FileKind::BlockDevice) => fail("a block device"),
        "DirectoryOrCreate" | "Directory" | "FileOrCreate" | "File" | "Socket" | "CharDevice"
        | "BlockDevice" => Ok(()),
        other => Err(format!("{other} is an invalid volume type")),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::volumes::host::{HostCall, RecordingHost};

    fn host_with(files: &[(&str, FileKind)]) -> RecordingHost {
        let host = RecordingHost::default();
        for (p, k) in files {
            host.files.lock().insert(PathBuf::from(p), *k);
        }
        host
    }

    #[test]
    fn or_create_types_create_what_is_missing_with_upstream_modes() {
        let host = host_with(&[]);
        set_up(Path::new("/srv/d"), Some("DirectoryOrCreate"), &host).unwrap();
        set_up(Path::new("/srv/f"), Some("FileOrCreate"), &host).unwrap();
        assert_eq!(
            *host.calls.lock(),
            [
                HostCall::CreateDir("/srv/d".into(), 0o755),
                HostCall::CreateFile("/srv/f".into(), 0o644)
            ]
        );
    }

    #[test]
    fn a_path_of_the_wrong_kind_fails_the_type_check_with_upstream_message() {
        let host = host_with(&[("/srv/f", FileKind::File), ("/run/s", FileKind::Socket)]);
        let err = set_up(Path::new("/srv/f"), Some("Directory"), &host).unwrap_err();
        assert_eq!(err, "hostPath type check failed: /srv/f is not a directory");
        let err = set_up(Path::new("/srv/f"), Some("DirectoryOrCreate"), &host).unwrap_err();
        assert_eq!(err, "hostPath type check failed: /srv/f is not a directory");
        let err = set_up(Path::new("/none"), Some("File"), &host).unwrap_err();
        assert_eq!(err, "hostPath type check failed: /none is not a file");
        let err = set_up(Path::new("/srv/f"), Some("CharDevice"), &host).unwrap_err();
        assert_eq!(
            err,
            "hostPath type check failed: /srv/f is not a character device"
        );
        set_up(Path::new("/run/s"), Some("Socket"), &host).unwrap();
        set_up(Path::new("/srv/f"), Some("FileOrCreate"), &host).unwrap();
        set_up(Path::new("/none"), None, &host).unwrap();
        assert!(host.calls.lock().is_empty());
    }
}
