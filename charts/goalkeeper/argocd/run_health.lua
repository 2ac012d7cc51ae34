-- Test harness: `lua run_health.lua OBJ HEALTH` loads OBJ (a Lua chunk returning the
-- resource as a table) into the global `obj`, runs the HEALTH script as Argo CD does, and
-- prints the status and the message on two lines.
obj = dofile(arg[1])
local hs = dofile(arg[2])
print(hs.status)
print(hs.message or "")
