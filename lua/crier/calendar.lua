-- crier.calendar: the proleptic Gregorian calendar in days since 1970-01-01
-- (H. Hinnant's day algorithms), the one every module that computes dates
-- uses (crier.template's date filter, crier.tz, crier.cron, crier.testing's
-- clock). Pure Lua, no dependencies: loads in LuaJIT, crier serve and nginx.
local floor = math.floor

local calendar = {}

-- calendar.days_from_civil(y, m, d) -> days since 1970-01-01.
function calendar.days_from_civil(y, m, d)
    if m <= 2 then
        y = y - 1
    end
    local era = floor(y / 400)
    local yoe = y - era * 400
    local mp = (m + 9) % 12
    local doy = floor((153 * mp + 2) / 5) + d - 1
    local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
    return era * 146097 + doe - 719468
end

-- calendar.civil_from_days(days) -> y, m, d.
function calendar.civil_from_days(z)
    z = z + 719468
    local era = floor(z / 146097)
    local doe = z - era * 146097
    local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
    local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
    local mp = floor((5 * doy + 2) / 153)
    local d = doy - floor((153 * mp + 2) / 5) + 1
    local m = mp < 10 and mp + 3 or mp - 9
    local y = yoe + era * 400
    if m <= 2 then
        y = y + 1
    end
    return y, m, d
end

return calendar
