// Test certificates: a throwaway CA and a server certificate for 127.0.0.1/localhost,
// made with openssl in a temporary folder (removed by `remove()`).

/** Files of a test PKI, all PEM. */
export interface TestCerts {
  readonly dir: string;
  /** The CA certificate clients must trust. */
  readonly caFile: string;
  /** Server certificate (SAN: IP 127.0.0.1, DNS localhost), signed by the CA. */
  readonly certFile: string;
  readonly keyFile: string;
  /** A second, unrelated CA: trusting it instead must fail verification. */
  readonly otherCaFile: string;
  /** Removes the folder. */
  remove(): Promise<void>;
}

/** True when openssl is on PATH (or in /usr/bin). */
export function haveOpenssl(): boolean {
  for (const p of [...(Deno.env.get("PATH") ?? "").split(":"), "/usr/bin"]) {
    try {
      if (Deno.statSync(`${p}/openssl`).isFile) return true;
    } catch {
      // not here
    }
  }
  return false;
}

async function openssl(dir: string, args: string[]): Promise<void> {
  const out = await new Deno.Command("openssl", { args, cwd: dir, stdin: "null" }).output();
  if (!out.success) {
    throw new Error(
      `openssl ${args.join(" ")} failed (${out.code}): ${new TextDecoder().decode(out.stderr)}`,
    );
  }
}

async function makeCa(dir: string, name: string): Promise<void> {
  await openssl(dir, [
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-days",
    "2",
    "-subj",
    `/CN=${name}`,
    "-keyout",
    `${name}.key`,
    "-out",
    `${name}.pem`,
  ]);
}

/**
 * Generates a CA and a server certificate signed by it.
 * @throws {Error} openssl is missing or fails
 */
export async function makeTestCerts(): Promise<TestCerts> {
  const dir = await Deno.makeTempDir({ prefix: "dynamo-certs-" });
  try {
    await makeCa(dir, "ca");
    await makeCa(dir, "other-ca");
    await openssl(dir, [
      "req",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-subj",
      "/CN=127.0.0.1",
      "-keyout",
      "server.key",
      "-out",
      "server.csr",
    ]);
    await Deno.writeTextFile(
      `${dir}/server.ext`,
      [
        "basicConstraints=CA:FALSE",
        "keyUsage=digitalSignature,keyEncipherment",
        "extendedKeyUsage=serverAuth,clientAuth",
        "subjectAltName=IP:127.0.0.1,DNS:localhost",
        "",
      ].join("\n"),
    );
    await openssl(dir, [
      "x509",
      "-req",
      "-in",
      "server.csr",
      "-CA",
      "ca.pem",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-days",
      "2",
      "-extfile",
      "server.ext",
      "-out",
      "server.pem",
    ]);
  } catch (err) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw err;
  }
  return {
    dir,
    caFile: `${dir}/ca.pem`,
    certFile: `${dir}/server.pem`,
    keyFile: `${dir}/server.key`,
    otherCaFile: `${dir}/other-ca.pem`,
    remove: () => Deno.remove(dir, { recursive: true }).catch(() => {}),
  };
}
