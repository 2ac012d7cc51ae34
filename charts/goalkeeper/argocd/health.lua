-- Argo CD health of a goalkeeper.dev Monitor (resource.customizations, see docs/argocd.md).
-- A monitor may stay active for days, so an active monitor whose last check was accepted
-- is Healthy: only a monitor that has not yet had an accepted check (or has not yet seen
-- its latest spec) is Progressing, and a sync never waits on the goal itself.
local hs = {}
local status = obj.status
if status == nil or status.monitor == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to take up the monitor"
  return hs
end

if status.monitor == "stopped" then
  local stop = status.stop or {}
  if stop.reason == "goalComplete" then
    hs.status = "Healthy"
    hs.message = stop.message or "Goal complete"
  else
    hs.status = "Degraded"
    hs.message = (stop.reason or "stopped") .. ": " .. (stop.message or "no stop message")
  end
  return hs
end

local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil
    and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to take up generation " .. tostring(generation)
  return hs
end

local doing = ""
if status.step ~= nil and status.step.kind ~= nil then
  doing = "; " .. status.step.kind .. " step running"
elseif status.schedule ~= nil and status.schedule.nextCheckAt ~= nil then
  doing = "; next check at " .. status.schedule.nextCheckAt
end

local checks = status.checks or 0
if checks == 0 then
  hs.status = "Progressing"
  hs.message = "Waiting for the first accepted check" .. doing
  return hs
end

hs.status = "Healthy"
hs.message = "Active: " .. tostring(checks) .. " checks accepted; goal " ..
  (status.goal or "unknown") .. ", work " .. (status.work or "unknown") .. doing
return hs
