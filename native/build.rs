// Compiles the batched copy kernel (cuda/copy_blocks.cu) to PTX with nvcc when nvcc is
// found, for src/kernel.rs to embed. Without nvcc, or when it fails, the PTX is empty and
// the library still builds: VRAM batches then run as one cudaMemcpyAsync per descriptor.
//
// nvcc is `$NVCC` when set ("none" or empty: do not use nvcc), else the first `nvcc` on
// PATH, else /usr/local/cuda/bin/nvcc.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const KERNEL: &str = "cuda/copy_blocks.cu";

/// Virtual architectures to try, oldest first: PTX for the oldest one nvcc accepts JITs on
/// every newer GPU (compute_75 is CUDA 13's minimum; later nvccs may drop it).
const ARCHS: &[&str] = &["compute_75", "compute_80", "compute_90"];

fn main() {
    println!("cargo:rerun-if-changed={KERNEL}");
    println!("cargo:rerun-if-changed=cuda/copy_blocks.cuh");
    println!("cargo:rerun-if-env-changed=NVCC");
    println!("cargo:rerun-if-env-changed=PATH");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let ptx = out.join("copy_blocks.ptx");
    let (arch, note) = match find_nvcc() {
        Err(why) => (None, why),
        Ok(nvcc) => compile(&nvcc, &ptx),
    };
    if arch.is_none() {
        println!(
            "cargo:warning=copy kernel not built ({}); VRAM batches will use one cudaMemcpyAsync per descriptor",
            one_line(&note)
        );
        fs::write(&ptx, "").expect("write an empty PTX into OUT_DIR");
    }
    println!("cargo:rustc-env=DYN_PTX_ARCH={}", arch.unwrap_or(""));
    println!("cargo:rustc-env=DYN_PTX_NOTE={}", one_line(&note));
}

fn find_nvcc() -> Result<PathBuf, String> {
    if let Some(v) = env::var_os("NVCC") {
        if v.is_empty() || v == "none" {
            return Err("NVCC is set to disable nvcc".into());
        }
        let p = PathBuf::from(&v);
        return if p.components().count() > 1 || p.is_absolute() {
            if p.is_file() {
                Ok(p)
            } else {
                Err(format!("NVCC={} does not exist", p.display()))
            }
        } else {
            on_path(&p).ok_or_else(|| format!("NVCC={} is not on PATH", p.display()))
        };
    }
    on_path(Path::new("nvcc"))
        .or_else(|| {
            let p = PathBuf::from("/usr/local/cuda/bin/nvcc");
            p.is_file().then_some(p)
        })
        .ok_or_else(|| "nvcc not found on PATH nor in /usr/local/cuda/bin".into())
}

fn on_path(name: &Path) -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Tries each architecture in turn; returns the one that compiled and a note for the
/// library to report (nvcc's path and release, or why nothing compiled).
fn compile(nvcc: &Path, ptx: &Path) -> (Option<&'static str>, String) {
    let release = Command::new(nvcc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.contains("release"))
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "version unknown".into());
    let mut last = String::new();
    for &arch in ARCHS {
        let run = Command::new(nvcc)
            .args(["-ptx", "-O3", &format!("-arch={arch}"), "-o"])
            .arg(ptx)
            .arg(KERNEL)
            .output();
        match run {
            Ok(o) if o.status.success() => {
                return (
                    Some(arch),
                    format!("{} ({release}), -arch={arch}", nvcc.display()),
                )
            }
            Ok(o) => {
                last = format!(
                    "{} -arch={arch} failed ({}): {}",
                    nvcc.display(),
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                )
            }
            Err(e) => last = format!("cannot run {}: {e}", nvcc.display()),
        }
    }
    (None, last)
}

fn one_line(s: &str) -> String {
    let s: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    s.chars().take(400).collect()
}
