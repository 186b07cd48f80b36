-- The crypto of signature verification: SHA-256, HMAC-SHA256, HMAC-SHA1 and AES-256-GCM
-- decryption through LuaJIT's FFI to OpenSSL's libcrypto (the one nginx links; busted loads
-- the library by name), hex and base64. Pure LuaJIT: no ngx, so the specs load it.
local ffi = require("ffi")

local C
local ffi_new = ffi.new
local ffi_str = ffi.string
local byte = string.byte
local char = string.char
local sub = string.sub
local concat = table.concat
local type = type

local _M = {}

ffi.cdef([[
typedef struct evp_md_st EVP_MD;
typedef struct evp_cipher_st EVP_CIPHER;
typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;
const EVP_MD *EVP_sha256(void);
const EVP_MD *EVP_sha1(void);
unsigned char *HMAC(const EVP_MD *evp_md, const void *key, int key_len,
                    const unsigned char *d, size_t n, unsigned char *md, unsigned int *md_len);
unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md);
typedef struct {
    unsigned int h[8];
    unsigned int Nl, Nh;
    unsigned int data[16];
    unsigned int num, md_len;
} tollgate_sha256_ctx;
int SHA256_Init(tollgate_sha256_ctx *c);
int SHA256_Update(tollgate_sha256_ctx *c, const void *data, size_t len);
int SHA256_Final(unsigned char *md, tollgate_sha256_ctx *c);
const EVP_CIPHER *EVP_aes_256_gcm(void);
EVP_CIPHER_CTX *EVP_CIPHER_CTX_new(void);
void EVP_CIPHER_CTX_free(EVP_CIPHER_CTX *c);
int EVP_DecryptInit_ex(EVP_CIPHER_CTX *ctx, const EVP_CIPHER *type, void *impl,
                       const unsigned char *key, const unsigned char *iv);
int EVP_CIPHER_CTX_ctrl(EVP_CIPHER_CTX *ctx, int type, int arg, void *ptr);
int EVP_DecryptUpdate(EVP_CIPHER_CTX *ctx, unsigned char *out, int *outl,
                      const unsigned char *in, int inl);
int EVP_DecryptFinal_ex(EVP_CIPHER_CTX *ctx, unsigned char *outm, int *outl);
]])

-- nginx links libcrypto: its symbols are in the global namespace; a plain LuaJIT loads it
do
    local ok = pcall(function() return ffi.C.SHA256_Init end)
    if ok then
        C = ffi.C
    else
        for _, name in ipairs({ "crypto", "libcrypto.so.3", "libcrypto.so.1.1" }) do
            local lok, lib = pcall(ffi.load, name)
            if lok then
                C = lib
                break
            end
        end
        if not C then
            error("tollgate.s3.sigcrypto: libcrypto not found", 0)
        end
    end
end

local SHA256_MD = C.EVP_sha256()
local SHA1_MD = C.EVP_sha1()
local md = ffi_new("unsigned char[64]")          -- one result at a time (no yield in between)
local mdlen = ffi_new("unsigned int[1]")

-- SHA-256 through the low-level SHA256_* calls on one reused context: no provider fetch, no
-- allocation (the one-shot SHA256() and HMAC() of OpenSSL 3 fetch the algorithm every call)
local sctx = ffi_new("tollgate_sha256_ctx")
local CTX_SIZE = ffi.sizeof("tollgate_sha256_ctx")

--- SHA-256 of s (32 raw bytes).
function _M.sha256(s)
    C.SHA256_Init(sctx)
    C.SHA256_Update(sctx, s, #s)
    C.SHA256_Final(md, sctx)
    return ffi_str(md, 32)
end

local pad = ffi_new("unsigned char[64]")

--- An HMAC-SHA256 key prepared once (the SHA-256 states after its inner and outer pads), for
--- hmac_prepared(): two compressions fewer per message. key: at most 64 bytes.
function _M.hmac_prepare(key)
    local st = ffi_new("tollgate_sha256_ctx[2]")
    local n = #key
    for round = 0, 1 do
        local x = round == 0 and 0x36 or 0x5c
        for i = 0, 63 do
            pad[i] = bit.bxor(i < n and byte(key, i + 1) or 0, x)
        end
        C.SHA256_Init(st[round])
        C.SHA256_Update(st[round], pad, 64)
    end
    return st
end

--- HMAC-SHA256 of msg under a key of hmac_prepare() (32 raw bytes).
function _M.hmac_prepared(st, msg)
    ffi.copy(sctx, st[0], CTX_SIZE)
    C.SHA256_Update(sctx, msg, #msg)
    C.SHA256_Final(md, sctx)
    ffi.copy(sctx, st[1], CTX_SIZE)
    C.SHA256_Update(sctx, md, 32)
    C.SHA256_Final(md, sctx)
    return ffi_str(md, 32)
end

--- HMAC-SHA256 of msg under key (32 raw bytes).
function _M.hmac_sha256(key, msg)
    C.HMAC(SHA256_MD, key, #key, msg, #msg, md, mdlen)
    return ffi_str(md, 32)
end

--- HMAC-SHA1 of msg under key (20 raw bytes).
function _M.hmac_sha1(key, msg)
    C.HMAC(SHA1_MD, key, #key, msg, #msg, md, mdlen)
    return ffi_str(md, 20)
end

local HEX = {}
for i = 0, 255 do
    HEX[i] = string.format("%02x", i)
end
local hexbuf = ffi_new("char[128]")

--- Lowercase hex of the raw string s (at most 64 bytes).
function _M.hex(s)
    local n = #s
    for i = 1, n do
        local h = HEX[byte(s, i)]
        hexbuf[2 * i - 2] = byte(h, 1)
        hexbuf[2 * i - 1] = byte(h, 2)
    end
    return ffi_str(hexbuf, 2 * n)
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64DEC = {}
for i = 1, 64 do
    B64DEC[byte(B64, i)] = i - 1
end

--- Standard base64 (with padding) of s.
function _M.b64(s)
    local out, n = {}, 0
    for i = 1, #s, 3 do
        local a, b, c = byte(s, i, i + 2)
        local v = a * 65536 + (b or 0) * 256 + (c or 0)
        local c1 = math.floor(v / 262144) % 64
        local c2 = math.floor(v / 4096) % 64
        local c3 = math.floor(v / 64) % 64
        local c4 = v % 64
        n = n + 1
        out[n] = sub(B64, c1 + 1, c1 + 1) .. sub(B64, c2 + 1, c2 + 1)
            .. (b and sub(B64, c3 + 1, c3 + 1) or "=") .. (c and sub(B64, c4 + 1, c4 + 1) or "=")
    end
    return concat(out)
end

--- The bytes of standard base64 s (padding required), or nil when s is not base64.
function _M.unb64(s)
    if type(s) ~= "string" or #s % 4 ~= 0 then
        return nil
    end
    local out, n = {}, 0
    for i = 1, #s, 4 do
        local a, b, c, d = byte(s, i, i + 3)
        local va, vb = B64DEC[a], B64DEC[b]
        local vc = c ~= 61 and B64DEC[c] or (c == 61 and 0)
        local vd = d ~= 61 and B64DEC[d] or (d == 61 and 0)
        if not (va and vb and vc and vd) or (c == 61 and d ~= 61)
                or (c == 61 or d == 61) and i + 3 < #s then
            return nil
        end
        local v = va * 262144 + vb * 4096 + vc * 64 + vd
        n = n + 1
        if c == 61 then
            out[n] = char(math.floor(v / 65536))
        elseif d == 61 then
            out[n] = char(math.floor(v / 65536), math.floor(v / 256) % 256)
        else
            out[n] = char(math.floor(v / 65536), math.floor(v / 256) % 256, v % 256)
        end
    end
    return concat(out)
end

local EVP_CTRL_GCM_SET_TAG = 0x11

--- AES-256-GCM decryption of ct (ciphertext without the tag) under key (32 bytes) with iv
--- (12 bytes), tag (16 bytes) and additional data aad: the plaintext, or nil, "decrypt" when
--- anything does not check out (wrong key, tampered ciphertext, tag or aad).
function _M.aes_gcm_open(key, iv, ct, tag, aad)
    if #key ~= 32 or #iv ~= 12 or #tag ~= 16 then
        return nil, "decrypt"
    end
    local ctx = C.EVP_CIPHER_CTX_new()
    if ctx == nil then
        return nil, "decrypt"
    end
    local out = ffi_new("unsigned char[?]", #ct + 16)
    local outl = ffi_new("int[1]")
    local ok = C.EVP_DecryptInit_ex(ctx, C.EVP_aes_256_gcm(), nil, key, iv) == 1
        and (aad == "" or C.EVP_DecryptUpdate(ctx, nil, outl, aad, #aad) == 1)
        and C.EVP_DecryptUpdate(ctx, out, outl, ct, #ct) == 1
    local n = outl[0]
    ok = ok and C.EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, ffi.cast("void *", tag)) == 1
        and C.EVP_DecryptFinal_ex(ctx, out + n, outl) == 1
    C.EVP_CIPHER_CTX_free(ctx)
    if not ok then
        return nil, "decrypt"
    end
    return ffi_str(out, n + outl[0])
end

return _M
