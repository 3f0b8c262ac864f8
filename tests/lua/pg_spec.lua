-- Specs for crier.pg and crier.crypto without nginx: message encoding and
-- decoding, SCRAM-SHA-256 against RFC 7677's test vector, md5 passwords,
-- connection strings, and whole conversations with a scripted server over
-- a fake socket (startup, SCRAM, queries, errors, transactions).
local pg = require "crier.pg"
local crypto = require "crier.crypto"
local codec = pg._codec

local i32, i16 = codec.i32, codec.i16

describe("crier.crypto", function()
    it("hashes with libcrypto", function()
        assert.is_true(crypto.available())
        assert.are.equal("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            crypto.hex(crypto.sha256("")))
        assert.are.equal("900150983cd24fb0d6963f7d28e17f72", crypto.hex(crypto.md5("abc")))
        -- RFC 4231 test case 2
        assert.are.equal("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            crypto.hex(crypto.hmac_sha256("Jefe", "what do ya want for nothing?")))
    end)
    it("base64 and base64url round trip", function()
        for _, s in ipairs({ "", "f", "fo", "foo", "foob", "fooba", "foobar", "\255\254\253" }) do
            assert.are.equal(s, crypto.unbase64(crypto.base64(s)))
            assert.are.equal(s, crypto.unbase64url(crypto.base64url(s)))
        end
        assert.are.equal("Zm9vYmE=", crypto.base64("fooba"))
        assert.are.equal("__79", crypto.base64url("\255\254\253"))
        assert.is_nil(crypto.unbase64("@@@@"))
    end)
    it("keeps the nginx adapter's rules version (same digest as before)", function()
        assert.are.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            require("crier.nginx").sha256_hex("abc"))
    end)
end)

describe("crier.pg codec", function()
    it("encodes integers big-endian and reads them back signed", function()
        assert.are.equal("\0\0\1\0", i32(256))
        assert.are.equal(-1, codec.get_i32(i32(-1), 1))
        assert.are.equal(-2, codec.get_i16(i16(-2), 1))
    end)

    it("builds the startup message", function()
        local m = codec.startup({ user = "u", database = "d" })
        assert.are.equal(#m, codec.get_i32(m, 1))
        assert.are.equal(196608, codec.get_i32(m, 5))
        assert.are.equal("database\0d\0user\0u\0\0", m:sub(9))
    end)

    it("sends parameters apart from the SQL, NULL as length -1", function()
        local hostile = "'); DROP TABLE t; --"
        local m = codec.extended("SELECT $1, $2, $3, $4", { hostile, pg.null, 12, true, n = 4 }, 4)
        -- Parse carries the SQL text unchanged
        assert.are.equal("P", m:sub(1, 1))
        local parse_len = codec.get_i32(m, 2)
        assert.are.equal("\0SELECT $1, $2, $3, $4\0\0\0", m:sub(6, 1 + parse_len))
        local bind = m:sub(2 + parse_len)
        assert.are.equal("B", bind:sub(1, 1))
        assert.truthy(bind:find(i32(#hostile) .. hostile, 1, true))
        assert.truthy(bind:find(i32(-1), 1, true))
        assert.truthy(bind:find(i32(2) .. "12" .. i32(1) .. "t", 1, true))
        assert.are.equal("S\0\0\0\4", m:sub(-5))
        assert.has_error(function()
            codec.extended("SELECT 1\0", {}, 0)
        end)
    end)

    it("formats numbers and tables as parameter text", function()
        assert.are.equal("9007199254740991", codec.param_text(2 ^ 53 - 1))
        assert.are.equal("0.10000000000000001", codec.param_text(0.1))
        assert.are.equal('{"a":1}', codec.param_text({ a = 1 }))
        assert.is_nil(codec.param_text(nil))
        assert.are.equal("f", codec.param_text(false))
    end)

    it("decodes errors with their SQLSTATE", function()
        local f = codec.error_fields("SERROR\0VERROR\0C23505\0Mduplicate key\0Dkey (id)=(1)\0\0")
        assert.are.equal("23505", f.sqlstate)
        assert.are.equal("ERROR: duplicate key (SQLSTATE 23505); key (id)=(1)", codec.error_text(f))
    end)

    it("decodes rows by type, NULL as pg.null, raw rows as text without NULLs", function()
        local function col(name, oid)
            return name .. "\0" .. i32(0) .. i16(0) .. i32(oid) .. i16(-1) .. i32(-1) .. i16(0)
        end
        local desc = i16(5) .. col("b", 16) .. col("n", 20) .. col("j", 3802) .. col("t", 25) .. col("z", 25)
        local cols = codec.row_description(desc)
        assert.are.same({ name = "j", type = 3802 }, cols[3])
        local function v(s)
            return i32(#s) .. s
        end
        local row = i16(5) .. v("t") .. v("9007199254740993") .. v('{"k":[1]}') .. v("x") .. i32(-1)
        local decoded = codec.data_row(row, cols)
        assert.is_true(decoded.b)
        assert.are.equal("9007199254740993", decoded.n) -- beyond 2^53: kept exact as text
        assert.are.same({ k = { 1 } }, decoded.j)
        assert.are.equal(pg.null, decoded.z)
        assert.are.same({ b = "t", n = "9007199254740993", j = '{"k":[1]}', t = "x" },
            codec.data_row(row, cols, true))
    end)

    it("computes RFC 7677's SCRAM-SHA-256 example", function()
        local first, bare = codec.scram_first("user", "rOprNGfwEbeRWgbNEkqO")
        assert.are.equal("n,,n=user,r=rOprNGfwEbeRWgbNEkqO", first)
        local server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        local final, server_sig = codec.scram_final("pencil", bare, server_first, "rOprNGfwEbeRWgbNEkqO")
        assert.are.equal("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
            .. "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", final)
        assert.are.equal("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", server_sig)
    end)

    it("refuses a server nonce that does not extend ours", function()
        local _, bare = codec.scram_first("", "abc")
        local final, err = codec.scram_final("pw", bare, "r=xyz123,s=AAAA,i=4096", "abc")
        assert.is_nil(final)
        assert.matches("nonce", err)
    end)

    it("computes md5 passwords as PostgreSQL does", function()
        -- md5(md5("secret" .. "alice") .. salt)
        local inner = crypto.hex(crypto.md5("secretalice"))
        assert.are.equal("md5" .. crypto.hex(crypto.md5(inner .. "\1\2\3\4")),
            codec.md5_password("alice", "secret", "\1\2\3\4"))
    end)
end)

describe("crier.pg.parse_conninfo", function()
    it("reads libpq key=value strings with quotes", function()
        assert.are.same({ host = "/run/postgresql", dbname = "app", user = "u", password = "a b'c" },
            pg.parse_conninfo([[host=/run/postgresql dbname=app user=u password='a b\'c']]))
        assert.is_nil(pg.parse_conninfo("host"))
        assert.is_nil(pg.parse_conninfo("password='open"))
    end)
    it("reads URIs", function()
        assert.are.same(
            { user = "u", password = "p@ss", host = "db", port = "6432", dbname = "app", sslmode = "disable" },
            pg.parse_conninfo("postgresql://u:p%40ss@db:6432/app?sslmode=disable"))
    end)
end)

-- A fake socket: what the client sends is recorded; what it receives comes
-- from a script of server messages.
local function fake_socket(script)
    local buffer = table.concat(script)
    local sock = { sent = {} }
    function sock.connect()
        return true
    end
    function sock.send(_, data)
        sock.sent[#sock.sent + 1] = data
        return #data
    end
    function sock.receive(_, n)
        if #buffer < n then
            return nil, "closed"
        end
        local out = buffer:sub(1, n)
        buffer = buffer:sub(n + 1)
        return out
    end
    function sock.close()
        sock.closed = true
        return true
    end
    return sock
end

local function msg(kind, body)
    return codec.message(kind, body)
end
local READY_IDLE = msg("Z", "I")
local AUTH_OK = msg("R", i32(0))

describe("crier.pg conversations", function()
    it("starts up with trust, runs a query, reads rows and the command tag", function()
        local desc = i16(1) .. "id\0" .. i32(0) .. i16(0) .. i32(20) .. i16(8) .. i32(-1) .. i16(0)
        local sock = fake_socket({
            AUTH_OK, msg("S", "server_version\0" .. "15.0\0"), msg("K", i32(77) .. i32(1)), READY_IDLE,
            msg("1", ""), msg("2", ""), msg("T", desc), msg("D", i16(1) .. i32(2) .. "42"), msg("C", "SELECT 1\0"),
            READY_IDLE,
        })
        local db = assert(pg.connect({ socket = sock, user = "u", dbname = "d" }))
        assert.are.equal(77, db.backend_pid)
        assert.are.equal("15.0", db.parameters.server_version)
        local rows = assert(db:query("SELECT $1::bigint AS id", { 42 }))
        assert.are.equal(42, rows[1].id)
        assert.are.equal("SELECT 1", rows.command)
        assert.are.equal(1, rows.affected)
    end)

    it("authenticates with SCRAM and checks the server's signature", function()
        -- the server's messages depend on the client's random nonce: answer
        -- them by computing what a server would
        local sock = fake_socket({})
        local salt, iterations, password = "0123456789abcdef", 4096, "pencil"
        local step = 0
        local pending = msg("R", i32(10) .. "SCRAM-SHA-256\0\0")
        local server_first, client_first_bare
        function sock.receive(_, n)
            local out = pending:sub(1, n)
            pending = pending:sub(n + 1)
            return out
        end
        function sock.send(_, data)
            step = step + 1
            if step == 1 then -- startup
                return #data
            elseif step == 2 then -- SASLInitialResponse
                client_first_bare = data:match("n,,(n=.*)$")
                local nonce = client_first_bare:match("r=(.*)$")
                server_first = "r=" .. nonce .. "SERVER,s=" .. crypto.base64(salt) .. ",i=" .. iterations
                pending = msg("R", i32(11) .. server_first)
            elseif step == 3 then -- SASLResponse
                local without_proof = data:sub(6):match("^(.-),p=")
                local salted = crypto.pbkdf2_sha256(password, salt, iterations, 32)
                local auth = client_first_bare .. "," .. server_first .. "," .. without_proof
                local server_sig = crypto.hmac_sha256(crypto.hmac_sha256(salted, "Server Key"), auth)
                -- the proof must verify: ClientKey = proof XOR HMAC(StoredKey, auth)
                local proof = crypto.unbase64(data:match(",p=(.*)$"))
                local stored = crypto.sha256(crypto.hmac_sha256(salted, "Client Key"))
                local client_key = crypto.xor(proof, crypto.hmac_sha256(stored, auth))
                assert.are.equal(stored, crypto.sha256(client_key))
                pending = msg("R", i32(12) .. "v=" .. crypto.base64(server_sig)) .. AUTH_OK .. READY_IDLE
            end
            return #data
        end
        local db, err = pg.connect({ socket = sock, user = "u", password = password })
        assert.is_nil(err)
        assert.are.equal("ready", db.state)
    end)

    it("refuses a server whose SCRAM signature is wrong", function()
        local sock = fake_socket({})
        local pending = msg("R", i32(10) .. "SCRAM-SHA-256\0\0")
        local step = 0
        function sock.receive(_, n)
            local out = pending:sub(1, n)
            pending = pending:sub(n + 1)
            return out
        end
        function sock.send(_, data)
            step = step + 1
            if step == 2 then
                local nonce = data:match("r=(.*)$")
                pending = msg("R", i32(11) .. "r=" .. nonce .. "X,s=" .. crypto.base64("salt") .. ",i=4096")
            elseif step == 3 then
                pending = msg("R", i32(12) .. "v=" .. crypto.base64(("\0"):rep(32)))
            end
            return #data
        end
        local db, err = pg.connect({ socket = sock, user = "u", password = "pw" })
        assert.is_nil(db)
        assert.matches("SCRAM signature", err)
    end)

    it("returns nil, err, sqlstate on an error and stays usable", function()
        local sock = fake_socket({
            AUTH_OK, READY_IDLE,
            msg("E", "SERROR\0C42P01\0Mrelation \"nope\" does not exist\0\0"), READY_IDLE,
            msg("C", "SELECT 0\0"), READY_IDLE,
        })
        local db = assert(pg.connect({ socket = sock }))
        local rows, err, sqlstate = db:query("SELECT * FROM nope")
        assert.is_nil(rows)
        assert.are.equal("42P01", sqlstate)
        assert.matches("does not exist", err)
        assert.truthy(db:exec("SELECT 1 WHERE false"))
    end)

    it("marks the connection broken when the server goes away mid-answer", function()
        local sock = fake_socket({ AUTH_OK, READY_IDLE, msg("1", ""), "D\0\0" })
        local db = assert(pg.connect({ socket = sock }))
        local rows, err = db:query("SELECT pg_sleep(10)")
        assert.is_nil(rows)
        assert.matches("closed", err)
        assert.are.equal("broken", db.state)
        assert.is_true(sock.closed)
        local again, again_err = db:query("SELECT 1")
        assert.is_nil(again)
        assert.matches("broken", again_err)
    end)

    it("rolls a transaction back when its function raises, commits otherwise", function()
        local function cmd(tag)
            return msg("C", tag .. "\0") .. msg("Z", tag == "BEGIN" and "T" or "I")
        end
        local sock = fake_socket({ AUTH_OK, READY_IDLE, cmd("BEGIN"), cmd("ROLLBACK"), cmd("BEGIN"), cmd("COMMIT") })
        local db = assert(pg.connect({ socket = sock }))
        local ok, err = db:transaction(function()
            error("boom")
        end)
        assert.is_nil(ok)
        assert.matches("boom", err)
        assert.are.same({ 7, "x" }, { db:transaction(function()
            return 7, "x"
        end) })
        local sent = table.concat(sock.sent)
        assert.truthy(sent:find("Q\0\0\0\13ROLLBACK\0", 1, true))
        assert.truthy(sent:find(codec.simple("COMMIT"), 1, true))
    end)
end)
