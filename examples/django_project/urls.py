"""The example project's routes."""

from __future__ import annotations

from django.urls import path

from examples.django_project import views

urlpatterns = [
    path("", views.index, name="index"),
    path("sms", views.send_sms, name="sms"),
    path("quote", views.Quote.as_view(), name="quote"),
]
