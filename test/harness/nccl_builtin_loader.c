/* NCCL's built-in net transports, bound like a plugin.
 *
 * NCCL keeps each of its own net transports in a data object of its library:
 * the socket transport (what NCCL_NET=Socket selects) in `ncclNetSocket`, the
 * InfiniBand/RoCE verbs transport (NCCL_NET=IB) in `ncclNetIb`, both an
 * ncclNet_v11_t in NCCL 2.28. The symbols are local, so dlsym() cannot see
 * them. One is found the way a debugger finds it: dlopen() the library
 * (relocating the table's function pointers), read the same file's ELF
 * section headers, look the name up in its .symtab (the static symbol table,
 * present unless the library was stripped) and add the symbol's value to the
 * load base the dynamic loader reports. The file is input like any other:
 * every offset and size is checked against the file before use, and the
 * table found must live in the loaded library, be exactly an ncclNet_v11_t,
 * point its functions into the library and carry the expected name, or the
 * load fails with a message saying which.
 *
 * The library: the spec's PATH ("nccl-ib:/opt/nccl/lib/libnccl.so.2"), else
 * $NCCL_LIB, else "libnccl.so.2" through the normal search (LD_LIBRARY_PATH,
 * the ld.so cache), else the file the build found (RERAIL_NCCL_LIB_HINT, from
 * CMake). libnccl.so.2 needs no GPU or CUDA runtime to load, and neither
 * transport needs one to move host memory (the socket transport's one CUDA
 * call is stood in for below). The IB transport opens libibverbs itself
 * (dlopen, at init) and reads NCCL's own variables: NCCL_IB_HCA,
 * NCCL_IB_GID_INDEX, NCCL_SOCKET_IFNAME for its out-of-band connection. */
#include "nccl_builtin_loader.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nccl/net_v11.h"

/* The transports this loader knows: the spec that names one, its symbol in
 * libnccl, the name its table must carry, and whether its connect()/accept()
 * ask NCCL's CUDA runtime for the current device (see cuda_device_shim). */
typedef struct builtin_kind {
  const char *spec;
  const char *symbol;
  const char *name;
  int asks_cuda_device;
} builtin_kind;

static const builtin_kind kinds[] = {
    {"nccl-socket", "ncclNetSocket", "Socket", 1},
    /* NCCL 2.28's IB transport calls no CUDA function on the host-memory path
     * (checked in the disassembly: only the socket transport's connect and
     * accept call cudaGetDevice); its GPUDirect probes are sysfs files and an
     * ibv_reg_dmabuf_mr() with fd -1. */
    {"nccl-ib", "ncclNetIb", "IB", 0},
};
#define KNOWN_SPECS "nccl-socket[:PATH], nccl-ib[:PATH]"

static const builtin_kind *kind_of(const char *spec) {
  if (!spec) return NULL;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    size_t l = strlen(kinds[i].spec);
    if (strncmp(spec, kinds[i].spec, l) == 0 && (spec[l] == 0 || spec[l] == ':')) return &kinds[i];
  }
  return NULL;
}

int hnet_builtin_spec(const char *spec) { return kind_of(spec) != NULL; }

/* Finds a defined symbol of the given type (STT_OBJECT, STT_FUNC) in the
 * file's .symtab: its value and size. Returns 0, or -1 with why in err. */
static int symtab_lookup(const char *file, const char *symbol, int type, uint64_t *value, uint64_t *size,
                         char *err, size_t elen) {
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, elen, "cannot open %s to read its symbol table: %m", file);
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
    snprintf(err, elen, "%s: not an ELF file (too small)", file);
    close(fd);
    return -1;
  }
  size_t flen = (size_t)st.st_size;
  const unsigned char *f = mmap(NULL, flen, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (f == MAP_FAILED) {
    snprintf(err, elen, "cannot map %s: %m", file);
    return -1;
  }
  int rc = -1;
  int found = 0;
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64) {
    snprintf(err, elen, "%s: not a 64-bit ELF file", file);
    goto out;
  }
  if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > flen ||
      (flen - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum) {
    snprintf(err, elen, "%s: section headers out of the file's bounds", file);
    goto out;
  }
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(f + eh->e_shoff);
  for (unsigned i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB) continue;
    const Elf64_Shdr *sy = &sh[i];
    if (sy->sh_link >= eh->e_shnum || sy->sh_entsize != sizeof(Elf64_Sym) || sy->sh_offset > flen ||
        flen - sy->sh_offset < sy->sh_size) {
      snprintf(err, elen, "%s: malformed .symtab", file);
      goto out;
    }
    const Elf64_Shdr *ss = &sh[sy->sh_link];
    if (ss->sh_type != SHT_STRTAB || ss->sh_offset > flen || flen - ss->sh_offset < ss->sh_size) {
      snprintf(err, elen, "%s: malformed .strtab", file);
      goto out;
    }
    const Elf64_Sym *syms = (const Elf64_Sym *)(f + sy->sh_offset);
    const char *strs = (const char *)(f + ss->sh_offset);
    size_t nsyms = sy->sh_size / sizeof(Elf64_Sym), want = strlen(symbol) + 1;
    for (size_t k = 0; k < nsyms; k++) {
      const Elf64_Sym *s = &syms[k];
      if (ELF64_ST_TYPE(s->st_info) != type || s->st_shndx == SHN_UNDEF) continue;
      if (s->st_name >= ss->sh_size || ss->sh_size - s->st_name < want) continue;
      if (memcmp(strs + s->st_name, symbol, want)) continue;
      if (found++) {
        snprintf(err, elen, "%s: more than one symbol named %s", file, symbol);
        goto out;
      }
      *value = s->st_value;
      *size = s->st_size;
    }
  }
  if (!found)
    snprintf(err, elen, "%s: no %s symbol %s in its .symtab (a stripped library, or an NCCL without it)",
             file, type == STT_FUNC ? "function" : "data", symbol);
  else
    rc = 0;
out:
  munmap((void *)f, flen);
  return rc;
}

/* Whether p points into the library whose path is lib_path. */
static int in_library(const void *p, const char *lib_path) {
  Dl_info di;
  return p && dladdr(p, &di) && di.dli_fname && strcmp(di.dli_fname, lib_path) == 0;
}

/* NCCL's socket transport asks the CUDA runtime linked into libnccl for the
 * current device (cudaGetDevice) in connect() and accept(), only to put the
 * device number into the names of its helper threads, and fails the
 * connection when that call fails. On a machine without a GPU driver it
 * always fails ("CUDA driver version is insufficient"), so the transport
 * could not be measured on the CPU-only machines this benchmark runs on.
 * When, and only when, the runtime's own cudaGetDevice fails here, its entry
 * in this process's copy of libnccl is overwritten with "device 0, success":
 * the socket transport then runs exactly as it would on GPU 0 (its thread
 * names read device 0). Nothing else of NCCL is used by the harness, so no
 * other behaviour changes. x86-64 and AArch64 only; elsewhere the load fails
 * with a message. Returns 0, or -1 after printing why. */
static int cuda_device_shim(const char *spec, const char *path, uintptr_t base) {
  uint64_t value = 0, size = 0;
  char err[768];
  if (symtab_lookup(path, "cudaGetDevice", STT_FUNC, &value, &size, err, sizeof err)) {
    fprintf(stderr, "hnet: %s: %s\n", spec, err);
    return -1;
  }
  int (*get_device)(int *) = (int (*)(int *))(base + (uintptr_t)value);
  if (!in_library((const void *)(uintptr_t)get_device, path)) {
    fprintf(stderr, "hnet: %s: cudaGetDevice is not inside the loaded %s\n", spec, path);
    return -1;
  }
  int dev = -1;
  int cerr = get_device(&dev);
  if (cerr == 0) return 0;   /* a working CUDA runtime: NCCL's own answer stands */
#if defined(__x86_64__)
  /* mov dword [rdi], 0; xor eax, eax; ret */
  static const unsigned char code[] = {0xc7, 0x07, 0x00, 0x00, 0x00, 0x00, 0x31, 0xc0, 0xc3};
#elif defined(__aarch64__)
  /* str wzr, [x0]; mov w0, #0; ret */
  static const uint32_t code[] = {0xb900001f, 0x52800000, 0xd65f03c0};
#else
  fprintf(stderr, "hnet: %s: NCCL's cudaGetDevice fails here (CUDA error %d: no GPU driver?) and this "
          "architecture has no stand-in; the socket transport cannot connect\n", spec, cerr);
  return -1;
#endif
#if defined(__x86_64__) || defined(__aarch64__)
  if (size < sizeof code) {
    fprintf(stderr, "hnet: %s: cudaGetDevice in %s is too small (%llu bytes) to stand in for\n", spec, path,
            (unsigned long long)size);
    return -1;
  }
  long pg = sysconf(_SC_PAGESIZE);
  uintptr_t start = (uintptr_t)get_device & ~(uintptr_t)(pg - 1);
  size_t len = (uintptr_t)get_device + sizeof code - start;
  if (mprotect((void *)start, len, PROT_READ | PROT_WRITE | PROT_EXEC)) {
    fprintf(stderr, "hnet: %s: cannot make NCCL's cudaGetDevice writable: %m\n", spec);
    return -1;
  }
  memcpy((void *)(uintptr_t)get_device, code, sizeof code);
  mprotect((void *)start, len, PROT_READ | PROT_EXEC);
  __builtin___clear_cache((char *)(uintptr_t)get_device, (char *)(uintptr_t)get_device + sizeof code);
  if (getenv("HNET_VERBOSE"))
    fprintf(stderr, "hnet: %s: no working CUDA runtime here (error %d); NCCL's cudaGetDevice now answers "
            "device 0\n", spec, cerr);
  return 0;
#endif
}

static void *open_library(const char *explicit_path, char *tried, size_t tlen) {
  const char *cands[4];
  int n = 0;
  if (explicit_path && *explicit_path) {
    cands[n++] = explicit_path;
  } else {
    const char *env = getenv("NCCL_LIB");
    if (env && *env) cands[n++] = env;
    cands[n++] = "libnccl.so.2";
#ifdef RERAIL_NCCL_LIB_HINT
    cands[n++] = RERAIL_NCCL_LIB_HINT;
#endif
  }
  for (int i = 0; i < n; i++) {
    void *dl = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL);
    if (dl) return dl;
    const char *e = dlerror();
    size_t t = strlen(tried);
    snprintf(tried + t, tlen - t, "\n  %s: %s", cands[i], e ? e : "dlopen failed");
    if (explicit_path && *explicit_path) break;
  }
  return NULL;
}

int hnet_builtin_open(const char *spec, hnet_builtin *out) {
  memset(out, 0, sizeof *out);
  const builtin_kind *k = kind_of(spec);
  if (!k) {
    fprintf(stderr, "hnet: \"%s\" names no built-in NCCL transport (known: " KNOWN_SPECS ")\n",
            spec ? spec : "");
    return -1;
  }
  const char *colon = strchr(spec, ':');
  char tried[2048] = "";
  void *dl = open_library(colon ? colon + 1 : NULL, tried, sizeof tried);
  if (!dl) {
    fprintf(stderr,
            "hnet: %s: cannot open NCCL's library (libnccl.so.2; give its path as %s:PATH or in "
            "NCCL_LIB):%s\n",
            spec, k->spec, tried);
    return -1;
  }
  struct link_map *lm = NULL;
  if (dlinfo(dl, RTLD_DI_LINKMAP, &lm) || !lm || !lm->l_name || !lm->l_name[0]) {
    fprintf(stderr, "hnet: %s: the dynamic loader does not say which file it opened\n", spec);
    dlclose(dl);
    return -1;
  }
  snprintf(out->path, sizeof out->path, "%s", lm->l_name);
  out->base = (uintptr_t)lm->l_addr;
  uint64_t value = 0, size = 0;
  char err[768];
  const nccl_net_v11_t *t = NULL;
  if (symtab_lookup(out->path, k->symbol, STT_OBJECT, &value, &size, err, sizeof err)) {
    fprintf(stderr, "hnet: %s: %s\n", spec, err);
    goto fail;
  }
  if (size != sizeof(nccl_net_v11_t)) {
    fprintf(stderr,
            "hnet: %s: %s in %s is %llu bytes, an ncclNet_v11_t is %zu: this NCCL's built-in transport has "
            "another layout (NCCL 2.28's is v11); not bound\n",
            spec, k->symbol, out->path, (unsigned long long)size, sizeof(nccl_net_v11_t));
    goto fail;
  }
  t = (const nccl_net_v11_t *)(out->base + (uintptr_t)value);
  if (!in_library(t, out->path) || !in_library((const char *)t + size - 1, out->path)) {
    fprintf(stderr, "hnet: %s: %s (file offset 0x%llx + load base 0x%lx) is not inside the loaded %s\n", spec,
            k->symbol, (unsigned long long)value, (unsigned long)out->base, out->path);
    goto fail;
  }
  if (!in_library(t->name, out->path) || strncmp(t->name, k->name, strlen(k->name) + 1) != 0) {
    fprintf(stderr, "hnet: %s: %s in %s does not name itself \"%s\"; refusing to bind it\n", spec, k->symbol,
            out->path, k->name);
    goto fail;
  }
  /* Every entry the loader calls unconditionally must be a function of the library. */
  const void *must[] = {(const void *)t->init,        (const void *)t->devices,   (const void *)t->get_properties,
                        (const void *)t->listen,      (const void *)t->connect,   (const void *)t->accept,
                        (const void *)t->reg_mr,      (const void *)t->dereg_mr,  (const void *)t->isend,
                        (const void *)t->irecv,       (const void *)t->iflush,    (const void *)t->test,
                        (const void *)t->close_send,  (const void *)t->close_recv, (const void *)t->close_listen};
  for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
    if (!in_library(must[i], out->path)) {
      fprintf(stderr, "hnet: %s: entry %zu of %s does not point into %s; not an ncclNet_v11_t\n", spec, i,
              k->symbol, out->path);
      goto fail;
    }
  }
  if (k->asks_cuda_device && cuda_device_shim(spec, out->path, out->base)) goto fail;
  out->dl = dl;
  out->table = t;
  return 0;
fail:
  dlclose(dl);
  memset(out, 0, sizeof *out);
  return -1;
}
